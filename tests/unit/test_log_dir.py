"""``--log-dir`` safety: created new, never through a planted link, checked before any host."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.core.errors import OutputLost, UsageError

NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to reach a host fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a host was contacted: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_planted_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky and writable by all, like /tmp: allowed, but...
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious\n")
    (shared / "rank-0.log").symlink_to(victim)  # ...someone planted a link
    log_dir = LogDir(str(shared))
    with pytest.raises(UsageError, match=r"rank-0\.log already exists"):
        log_dir.open(["rank-0.log", "controller.log"])
    assert victim.read_bytes() == b"precious\n"
    assert not (shared / "controller.log").exists()  # nothing left behind


def test_dangling_symlink_is_not_followed_either(tmp_path: Path) -> None:
    (tmp_path / "controller.log").symlink_to(tmp_path / "would-be-created")
    with pytest.raises(UsageError, match="already exists"):
        LogDir(str(tmp_path)).open(["controller.log"])
    assert not (tmp_path / "would-be-created").exists()


def test_lazily_created_file_is_safe_too(tmp_path: Path) -> None:
    log_dir = LogDir(str(tmp_path))
    log_dir.open()
    (tmp_path / "rank-7.log").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OutputLost, match=r"cannot write .*rank-7\.log \(File exists\)"):
        log_dir.write("rank-7.log", b"x")  # mid-job: the job stops, nothing is followed
    assert not (tmp_path / "elsewhere").exists()
    log_dir.write("rank-7.log", b"x")  # said once: the logs are known to be incomplete


def test_a_later_attempts_file_already_there_is_refused_up_front(tmp_path: Path) -> None:
    """It stopped the restart instead (``cannot write ... (File exists)``, exit 1): rank-N.log
    were checked up front, rank-N.attempt-K.log made only when their attempt began."""
    (tmp_path / "rank-5.attempt-3.log").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "rank-0.attempt-4.log").write_text("past --max-restarts 2: not the job's")
    with pytest.raises(UsageError, match=r"rank-5\.attempt-3\.log already exists \(logs of an"):
        LogDir(str(tmp_path)).open(["rank-0.log", "controller.log"], restarts=2)
    assert not (tmp_path / "rank-0.log").exists()  # nothing left behind
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log"], restarts=1)  # attempt 2 at most: neither name is its
    log_dir.close()


def test_a_later_attempts_file_made_since_the_start_stops_that_attempt_only(
    tmp_path: Path,
) -> None:
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "controller.log"], restarts=1)
    (tmp_path / "rank-1.attempt-2.log").symlink_to(tmp_path / "elsewhere")  # planted meanwhile
    with pytest.raises(UsageError) as refused:
        log_dir.create(["rank-0.attempt-2.log", "rank-1.attempt-2.log"])
    assert str(refused.value) == (
        f"--log-dir {tmp_path}: rank-1.attempt-2.log was created since the job started, by "
        "someone else who may write to the directory; use a directory only you can write to"
    )
    log_dir.write("controller.log", b"job failed: restart 1: ...\n")  # still open: it says so
    log_dir.close()
    assert (tmp_path / "controller.log").read_bytes() == b"job failed: restart 1: ...\n"
    assert not (tmp_path / "elsewhere").exists()
    assert not (tmp_path / "rank-0.attempt-2.log").exists()  # ours, empty: removed


def test_directory_writable_by_everyone_is_refused_unless_sticky(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(UsageError, match="every user may write to it"):
        LogDir(str(open_dir)).open(["rank-0.log"])
    assert list(open_dir.iterdir()) == []
    open_dir.chmod(0o1777)
    log_dir = LogDir(str(open_dir))
    log_dir.open(["rank-0.log"])
    log_dir.write("rank-0.log", b"ok")
    log_dir.close()
    assert (open_dir / "rank-0.log").read_bytes() == b"ok"


def test_logs_of_an_earlier_job_are_not_appended_to(tmp_path: Path) -> None:
    first = LogDir(str(tmp_path / "logs"))
    first.open(["rank-0.log"])
    first.write("rank-0.log", b"first job\n")
    first.close()
    with pytest.raises(UsageError, match="logs of an earlier job"):
        LogDir(str(tmp_path / "logs")).open(["rank-0.log"])
    assert (tmp_path / "logs" / "rank-0.log").read_bytes() == b"first job\n"


def test_files_that_stay_empty_are_removed_so_the_directory_can_be_reused(
    tmp_path: Path,
) -> None:
    log_dir = LogDir(str(tmp_path / "logs"))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    log_dir.write("rank-1.log", b"only rank 1 spoke")
    log_dir.close()
    log_dir.close()  # idempotent
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["rank-1.log"]
    again = LogDir(str(tmp_path / "logs"))
    again.open(["rank-0.log", "controller.log"])  # a job that never started left nothing
    again.close()


@pytest.mark.parametrize(
    ("where", "problem"),
    [
        ("a-file", "not a directory"),
        ("a-file/below", "not a directory"),
        ("/proc/nope", "cannot create it (No such file or directory)"),
    ],
)
def test_unusable_directory_is_one_clear_error(tmp_path: Path, where: str, problem: str) -> None:
    (tmp_path / "a-file").write_text("x")
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(UsageError) as caught:
        LogDir(path).open(["rank-0.log"])
    assert str(caught.value) == f"--log-dir {path}: {problem}"


def test_unwritable_directory_is_one_clear_error() -> None:
    # Root may write anywhere: as root, the check runs in a child that became nobody.
    top = Path(tempfile.mkdtemp(prefix="clusterlaunch-logdir-"))
    try:
        top.chmod(0o755)  # nobody may look inside, not write
        locked = top / "locked"
        locked.mkdir(mode=0o555)
        assert _open_as_a_user(locked) == (
            f"--log-dir {locked}: cannot create rank-0.log (Permission denied)"
        )
    finally:
        shutil.rmtree(top)


def _open_as_a_user(path: Path) -> str:
    """The UsageError ``LogDir(path).open`` raises, in a forked child that is not root."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        message = b"no error"
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY.pw_gid)
                os.setuid(NOBODY.pw_uid)
            LogDir(str(path)).open(["rank-0.log"])
        except UsageError as exc:
            message = str(exc).encode()
        except BaseException as exc:
            message = repr(exc).encode()
        finally:
            os.write(write, message)
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return said


@pytest.mark.parametrize("command", ["run", "exec"])
def test_cli_checks_log_dir_before_contacting_any_host(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_network: None,
    command: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "far.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 2}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "taken").write_text("a file, not a directory")
    tail = ["train.py"] if command == "run" else ["--", "hostname"]
    code = main([command, "--log-dir", "taken", "far.yaml", *tail])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.splitlines() == ["clusterlaunch: error: --log-dir taken: not a directory"], err


@pytest.mark.parametrize("verbose", [False, True])
def test_connection_notes_go_to_controller_log_always_and_the_console_with_verbose(
    tmp_path: Path, verbose: bool
) -> None:
    import io

    from clusterlaunch.controller.console import Console
    from clusterlaunch.controller.joboutput import connection_notes
    from clusterlaunch.controller.request import JobRequest
    from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions
    from clusterlaunch.transport import SshSettings

    inventory = Inventory(path="h.yaml", hosts=(HostSpec(host="a", gpus=1),))
    request = JobRequest(inventory, (), LaunchOptions(script="t.py"), "j", SshSettings())
    err = io.BytesIO()
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["controller.log"])
    note = connection_notes(replace(request, verbose=verbose), Console(io.BytesIO(), err), log_dir)
    note("a: no SSH handshake with 10.0.0.1:22; retry 1/3 in 0.5 s")
    log_dir.close()
    logged = (tmp_path / "controller.log").read_text()
    assert logged.endswith(
        " clusterlaunch: a: no SSH handshake with 10.0.0.1:22; retry 1/3 in 0.5 s\n"
    )
    said = b"clusterlaunch: a: no SSH handshake with 10.0.0.1:22; retry 1/3 in 0.5 s\n"
    assert err.getvalue() == (said if verbose else b"")


def test_verbose_is_a_flag_of_every_job_command() -> None:
    from clusterlaunch.cli.parser import build_parser

    parser = build_parser()
    for argv in (
        ["run", "h", "t.py"],
        ["exec", "h"],
        ["check", "h"],
        ["ps", "h"],
        ["kill", "h", "j"],
    ):
        assert parser.parse_args([argv[0], "--verbose", *argv[1:]]).verbose
        assert not parser.parse_args(argv).verbose


@pytest.mark.torch  # the preflight runs on localhost: its Python must have torch
def test_a_failed_preflight_is_kept_in_controller_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch job's only record of why nothing started; the ranks' empty files still go."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.yaml").write_text("hosts:\n  - {host: localhost, gpus: 2}\n")
    argv = ["run", "--workdir", str(tmp_path / "w"), "--log-dir", "logs", "h.yaml", "nope.py"]
    (tmp_path / "w").mkdir()
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert said.startswith("clusterlaunch: preflight failed on 1 host(s); nothing was started\n")
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["controller.log"]
    logged = (tmp_path / "logs" / "controller.log").read_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", logged[:20])
    assert logged[20:] == said
