"""``--sync``: file selection, who-shares-what, what to send, and the rsync/ssh command lines.

The pure parts are tested by equality; the quoting is also checked against a
real ``sh`` and a real ``rsync`` (local subprocesses, no SSH, no network).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.controller.synccopy import Copier
from clusterlaunch.controller.syncscan import scan_source
from clusterlaunch.core import commands
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job
from clusterlaunch.core.sshargv import SESSION_KEYWORDS, Mux, subsystem_session
from clusterlaunch.core.syncplan import (
    LOCAL,
    RSYNC,
    RSYNC_MARK,
    SAME,
    SFTP,
    HostCheck,
    RemoteEntry,
    SyncTask,
    Transfer,
    parse_rsync_report,
    plan_copy,
    plan_tasks,
    report_line,
)
from clusterlaunch.core.syncsource import IgnoreRules, LocalEntry, SourceTree, select
from clusterlaunch.transport import SshSettings
from clusterlaunch.transport.local import LocalConnection
from tests.programs import needs_rsync

HOSTILE_PATHS = [
    "with space",
    "it's",
    'say "hi"',
    "$(touch pwned)",
    "`touch pwned`",
    "a;b && c",
    "tab\there",
    "*",
    "back\\slash",
    "日本語 é",
    "-starts-with-dash",
    "",
]


# ------------------------------------------------------------------------------ selection

TREE = [
    ".clusterlaunchignore",
    ".git/HEAD",
    ".git/objects/ab/cdef",
    "sub/.git",  # a submodule's .git file
    "train.py",
    "model.ckpt",
    "keep.ckpt",
    "deep/er/model.ckpt",
    "data/raw.bin",
    "data/keep.txt",
    "src/data/loader.py",
    "build/out.o",
    "src/build/gen.py",
    "notes with spaces ü.txt",
    ".clusterlaunch-sync-abc-0",
    "src/.clusterlaunch-sync-abc-0",
]
IGNORE = """\
# checkpoints, except one
*.ckpt
!keep.ckpt

data/
!data/keep.txt
/build
"""


def test_gitignore_semantics_and_defaults() -> None:
    assert select(TREE, IgnoreRules(IGNORE)) == [
        ".clusterlaunchignore",  # copied: it is part of the project
        "keep.ckpt",
        "notes with spaces ü.txt",
        "src/.clusterlaunch-sync-abc-0",  # only the top-level token names are reserved
        "src/build/gen.py",  # /build is anchored
        "train.py",
    ]
    # data/ is excluded as a directory: as in git, nothing inside comes back.


def test_without_ignore_file_only_git_and_tokens_are_skipped() -> None:
    assert select(TREE, IgnoreRules()) == sorted(
        p
        for p in TREE
        if not p.startswith(".git/") and p not in ("sub/.git", ".clusterlaunch-sync-abc-0")
    )


def test_git_can_be_re_included_tokens_cannot() -> None:
    chosen = select(TREE, IgnoreRules("!.git\n!.clusterlaunch-sync-*\n"))
    assert ".git/HEAD" in chosen and "sub/.git" in chosen
    assert ".clusterlaunch-sync-abc-0" not in chosen


def test_bad_pattern_names_file_and_line() -> None:
    with pytest.raises(UsageError, match=r"^proj/.clusterlaunchignore:3: '\\\\': .*gitignore"):
        IgnoreRules("ok\n# fine\n\\\n", "proj/.clusterlaunchignore")


@pytest.mark.parametrize("pattern", ["[z-a]", "**/[b-a]"])
def test_a_backwards_range_names_file_and_line(pattern: str) -> None:
    """pathspec raises re.error, not ValueError, for these: it was a traceback."""
    with pytest.raises(UsageError, match=r"^.clusterlaunchignore:2: .*bad character range"):
        IgnoreRules(f"data/\n{pattern}\n")


def test_scan_source_prunes_keeps_links_and_modes(tmp_path: Path) -> None:
    (tmp_path / ".clusterlaunchignore").write_text("data/\n*.ckpt\n")
    for path in ("a/b/c.py", "data/x", ".git/HEAD", "m.ckpt", "run.sh", "naïve 'q'.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(path)
    (tmp_path / "run.sh").chmod(0o751)
    (tmp_path / "latest").symlink_to("a/b/c.py")
    (tmp_path / "gone").symlink_to("nowhere")  # dangling links are copied as links too
    os.mkfifo(tmp_path / "fifo")  # never copied
    tree = scan_source(str(tmp_path))
    assert [e.path for e in tree.entries] == [
        ".clusterlaunchignore",
        "a/b/c.py",
        "gone",
        "latest",
        "naïve 'q'.txt",
        "run.sh",
    ]
    by_path = {e.path: e for e in tree.entries}
    assert by_path["latest"].link == "a/b/c.py" and by_path["gone"].link == "nowhere"
    assert by_path["run.sh"].mode == 0o751 and by_path["run.sh"].size == 6
    assert tree.dirs == ("a", "a/b")
    assert tree.files_from() == b"".join(e.path.encode() + b"\0" for e in tree.entries)


# ------------------------------------------------------------------------- shared dirs


def check(rank: int, seen: set[str], rsync: bool = True, local: bool = False) -> HostCheck:
    return HostCheck(rank, f"h{rank}", local, rsync, frozenset(seen))


def test_one_copy_per_directory_preferring_local_then_rsync() -> None:
    checks = [
        check(0, {"t0"}),
        check(1, {"t1", "t2"}, rsync=False),  # h1 and h2 share a directory
        check(2, {"t1", "t2"}),
        check(3, {"t3", "src"}),  # this very directory
        check(4, {"t4", "t5"}),
        check(5, {"t4", "t5"}, local=True),
        check(6, {"t6"}, rsync=False),
    ]
    assert plan_tasks(checks, "src", local_rsync=True) == [
        SyncTask((0,), RSYNC),
        SyncTask((2, 1), RSYNC),
        SyncTask((3,), SAME),
        SyncTask((5, 4), LOCAL),
        SyncTask((6,), SFTP),
    ]


def test_no_local_rsync_means_sftp_and_no_source_token_means_no_skip() -> None:
    checks = [check(0, {"t0", "src"}), check(1, {"t1"}, local=True)]
    assert plan_tasks(checks, None, local_rsync=False) == [
        SyncTask((0,), SFTP),
        SyncTask((1,), LOCAL),
    ]


# --------------------------------------------------------------------------- what to send

A = LocalEntry("a.py", 10, 1_700_000_000_900_000_000, 0o644)
B = LocalEntry("pkg/b.py", 20, 1_700_000_001_000_000_000, 0o755)
L = LocalEntry("pkg/link", 4, 1_700_000_002_000_000_000, 0o777, link="b.py")
C = LocalEntry("pkg/deep/c.py", 30, 1_700_000_003_000_000_000, 0o644)
TREE_ENTRIES = SourceTree("/src", (A, C, B, L))


def test_empty_destination_gets_everything() -> None:
    plan = plan_copy(TREE_ENTRIES, {})
    assert plan.mkdirs == ("pkg", "pkg/deep")
    assert plan.sends == (A, C, B, L) and plan.chmods == () and plan.conflicts == ()


def test_unchanged_is_judged_by_size_and_whole_second_mtime() -> None:
    remote = {
        "a.py": RemoteEntry("file", 10, 1_700_000_000, 0o644),  # sub-second part ignored
        "pkg": RemoteEntry("dir"),
        "pkg/b.py": RemoteEntry("file", 20, 1_700_000_001, 0o644),  # mode only: chmod
        "pkg/link": RemoteEntry("link", link="b.py"),
        "pkg/deep": RemoteEntry("dir"),
        "pkg/deep/c.py": RemoteEntry("file", 31, 1_700_000_003, 0o644),  # size differs
        "extra.txt": RemoteEntry("file", 1, 1, 0o644),  # never deleted
    }
    plan = plan_copy(TREE_ENTRIES, remote)
    assert (plan.mkdirs, plan.sends, plan.chmods, plan.conflicts) == ((), (C,), (B,), ())


def test_changed_type_time_or_link_target_is_sent() -> None:
    remote = {
        "a.py": RemoteEntry("link", link="x"),
        "pkg": RemoteEntry("dir"),
        "pkg/b.py": RemoteEntry("file", 20, 1_700_000_002, 0o755),
        "pkg/link": RemoteEntry("link", link="other"),
    }
    assert plan_copy(TREE_ENTRIES, remote).sends == (A, C, B, L)


def test_type_conflicts_are_reported_not_forced() -> None:
    remote = {"a.py": RemoteEntry("dir"), "pkg": RemoteEntry("file", 1, 1, 0o644)}
    assert plan_copy(TREE_ENTRIES, remote).conflicts == (
        "pkg is a file on the host, not a directory",
        "a.py is a directory on the host",
    )


def test_rsync_report_parsing() -> None:
    out = (
        b"some login banner\n"
        + RSYNC_MARK.encode()
        + "<f+++++++++ 12 dir/naïve name.py\n".encode()
        + RSYNC_MARK.encode()
        + b"cd+++++++++ 4096 dir/\n"
        + RSYNC_MARK.encode()
        + b"cL+++++++++ 6 latest -> dir/x\n"
        + RSYNC_MARK.encode()
        + b".f...p..... 99 mode-only.sh\n"
        + RSYNC_MARK.encode()
        + b"<f.st...... 30 new\\#012line\n"
    )
    assert parse_rsync_report(out) == Transfer(
        ("dir/naïve name.py", "latest -> dir/x", "new\nline"), 42
    )


def test_report_lines() -> None:
    assert (
        report_line(["n0", "n1"], "/w", RSYNC, Transfer(("a", "b"), 3 * 1024 + 512), 1.234)
        == "sync n0 (and n1: same directory) -> /w: rsync, sent 2 files (3.5 KiB) in 1.23 s"
    )
    assert report_line(["n0"], "/w", SFTP, Transfer(("a",), 5), 0.0) == (
        "sync n0 -> /w: sftp, sent 1 file (5 B) in 0.00 s"
    )
    assert report_line(["n0"], "/w", SAME, Transfer(), 0.0) == (
        "sync n0: skipped, /w is this directory"
    )


# ------------------------------------------------------------------------ command lines

TARGET = SshTarget(
    alias="gpu1",
    hostname="10.0.0.1",
    port=2222,
    user="it's me",
    identity_files=("/keys/id one", "/keys/id'2"),
    identities_only=True,
    known_hosts_files=("/kh/known hosts", "/kh/other"),
    proxy_jump="jump@bastion:22",
    given=("user", "port"),  # the hosts file's: -l and -p (the config's ssh reads itself)
    connect_timeout=2.5,
)


# Never from the user's config for a command session: forwards, RemoteCommand, LocalCommand, a tty.
SESSION_ONLY = [
    "-T", "-x", "-o", "ClearAllForwardings=yes", "-o", "RemoteCommand=none",
    "-o", "PermitLocalCommand=no",
]  # fmt: skip


def test_ssh_argv_repeats_every_setting_and_checks_host_keys() -> None:
    argv = commands.ssh_argv(TARGET, config_file="/cfg/my config", strict=False, connect_timeout=10)
    assert argv == [
        "ssh", "-F", "/cfg/my config", "-p", "2222", "-l", "it's me",
        "-o", "IdentitiesOnly=yes",  # no -i: ssh reads (and expands) IdentityFile itself
        "-o", "StrictHostKeyChecking=accept-new", "-o", "BatchMode=yes",
        "-o", "ConnectTimeout=3", "-o", "ProxyJump=jump@bastion:22",
        "-o", "ControlMaster=no",  # never a master of its own (ControlPersist yes outlived us)
        *SESSION_ONLY,
    ]  # fmt: skip
    plain = SshTarget(alias="h", hostname="h")
    assert commands.ssh_argv(plain, config_file="/dev/null", strict=True, connect_timeout=10) == [
        "ssh", "-F", "/dev/null",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
        "-o", "ControlMaster=no", *SESSION_ONLY,
    ]  # fmt: skip


def test_session_keywords_the_config_sets_are_overridden_and_only_those() -> None:
    """An ssh before 8.7 refuses ``-o StdinNull=no``: only a keyword the config set (which
    that ssh therefore reads) is named. A master's session type is its ``-N``."""
    every = SshTarget(alias="h", hostname="h", session_keywords=SESSION_KEYWORDS)
    argv = commands.ssh_argv(every, config_file=None, strict=True, connect_timeout=1)
    wanted = ["ForkAfterAuthentication=no", "StdinNull=no", "SessionType=default"]
    assert all(option in argv for option in wanted)
    master = commands.ssh_argv(
        every, config_file=None, strict=True, connect_timeout=1, mux=Mux("/s", master=True)
    )
    assert "ForkAfterAuthentication=no" in master and "SessionType=default" not in master
    plain = commands.ssh_argv(SshTarget(alias="h", hostname="h"), config_file=None,
                              strict=True, connect_timeout=1)  # fmt: skip
    assert not any(word.split("=")[0] in ("StdinNull", "SessionType") for word in plain)
    assert subsystem_session(argv).count("SessionType=subsystem") == 1
    assert "-s" not in subsystem_session(argv) and subsystem_session(plain)[-1] == "-s"


def test_known_hosts_and_keys_are_left_to_ssh_reading_its_config() -> None:
    # Handed back expanded, ssh expanded them again (a "%" from "%%" ended it); a '"'
    # in a name could not be written as an option at all.
    odd = SshTarget(alias="h", hostname="h", known_hosts_files=('/a"b',), identity_files=("/k",))
    argv = commands.ssh_argv(odd, config_file="/cfg", strict=True, connect_timeout=1)
    assert not any("KnownHostsFile" in word or word == "-i" for word in argv)
    with pytest.raises(UsageError, match="ssh cannot take"):  # a control path still can't
        commands.ssh_argv(
            odd, config_file="/cfg", strict=True, connect_timeout=1, mux=Mux('/run/a"b')
        )


def test_rsync_argv() -> None:
    argv = commands.rsync_argv(["ssh", "-p", "22"], "gpu1", "~/my proj", "/src/", RSYNC_MARK)
    assert argv == [
        "rsync", "--links", "--perms", "--times", "--omit-dir-times", "--sparse", "--protect-args",
        "--8-bit-output", "--from0", "--files-from=-", f"--out-format={RSYNC_MARK}%i %l %n",
        "--rsh=ssh -p 22", "--", "/src/", "gpu1:my proj",
    ]  # fmt: skip
    assert commands.rsync_argv(["ssh"], "::1", "~", "/s", "")[-1] == "[::1]:."


@pytest.mark.parametrize(
    ("path", "expected"), [("~", "."), ("~/", "."), ("~/a b", "a b"), ("/x", "/x"), ("r", "r")]
)
def test_home_relative(path: str, expected: str) -> None:
    assert commands.home_relative(path) == expected


@needs_rsync
def test_rsync_splits_the_rsh_string_back_into_our_words(tmp_path: Path) -> None:
    """rsync runs our --rsh program: it must receive exactly the words we quoted."""
    dump = tmp_path / "dump.py"
    out = tmp_path / "argv.json"
    dump.write_text(
        "import json, os, sys\n"
        "open(os.environ['DUMP_TO'], 'w').write(json.dumps(sys.argv[1:]))\n"
        "sys.exit(1)\n"
    )
    words = [sys.executable, str(dump), *HOSTILE_PATHS, "line\nbreak"]
    argv = commands.rsync_argv(words, "the-host", "~/dest dir", str(tmp_path), RSYNC_MARK)
    subprocess.run(
        argv, input=b"", capture_output=True, env={**os.environ, "DUMP_TO": str(out)}, timeout=30
    )
    received = json.loads(out.read_text())
    assert received[: len(words) - 2] == [*HOSTILE_PATHS, "line\nbreak"]
    assert received[len(words) - 2] == "the-host"  # then rsync's own server command


@pytest.mark.parametrize("name", [n for n in HOSTILE_PATHS if n and "\n" not in n])
def test_sync_shell_commands_through_sh(name: str, tmp_path: Path) -> None:
    workdir = str(tmp_path / "deep" / name)
    token = ".clusterlaunch-sync-00ff-1"
    run = lambda command: subprocess.run(  # noqa: E731
        ["/bin/sh", "-c", command], capture_output=True, cwd=tmp_path, timeout=30
    )
    prepared = run(commands.sync_prepare_command(workdir, token))
    assert prepared.returncode == 0, prepared.stderr
    assert (Path(workdir) / token).is_file()
    assert prepared.stdout.decode().startswith("rsync=")
    listed = run(commands.sync_tokens_command(workdir, ".clusterlaunch-sync-00ff-"))
    assert listed.stdout.decode().splitlines() == [f"token={token}"]
    assert run(commands.sync_cleanup_command(workdir, token)).returncode == 0
    assert os.listdir(workdir) == []
    assert not (tmp_path / "pwned").exists()


def test_prepare_fails_under_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    command = commands.sync_prepare_command(str(tmp_path / "file" / "dest"), "t")
    assert subprocess.run(["/bin/sh", "-c", command], capture_output=True).returncode != 0


# -------------------------------------------------------------------- local copy, for real


def local_node(dest: Path):  # type: ignore[no-untyped-def]
    inventory = Inventory("hosts.yaml", (HostSpec("localhost", 1, workdir=str(dest)),))
    plan = plan_job(
        inventory,
        [SshTarget(alias="localhost", hostname="localhost", port=0)],
        LaunchOptions(script="x.py"),
        job_id="j",
        local_env={},
        local_cwd="/",
        agent_size=1,
    )
    return plan.nodes[0]


def test_local_copy_sends_changed_files_only(tmp_path: Path) -> None:
    source, dest = tmp_path / "src", tmp_path / "dest dir"
    (source / "pkg").mkdir(parents=True)
    (source / "a.py").write_text("a")
    (source / "pkg" / "b.py").write_text("b")
    (source / "link").symlink_to("a.py")
    dest.mkdir()
    node = local_node(dest)
    task = SyncTask((0,), LOCAL)

    def sync() -> tuple[str, ...]:
        copier = Copier(scan_source(str(source)), {"localhost": LocalConnection()}, SshSettings())
        transfer, _, error = copier.run(node, task)
        assert error is None
        return transfer.paths

    assert sync() == ("a.py", "link", "pkg/b.py")
    assert os.readlink(dest / "link") == "a.py"
    assert (dest / "pkg" / "b.py").read_text() == "b"
    assert sync() == ()
    (source / "pkg" / "b.py").write_text("bb")
    (source / "a.py").chmod(0o700)
    assert sync() == ("pkg/b.py",)
    assert (dest / "pkg" / "b.py").read_text() == "bb"
    assert (dest / "a.py").stat().st_mode & 0o777 == 0o700
    assert sorted(os.listdir(dest)) == ["a.py", "link", "pkg"]  # no temporary files left


# --------------------------------------------------------------------------------- CLI


def test_bad_ignore_file_is_a_usage_error_before_connecting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 1}\n")
    (tmp_path / "train.py").write_text("")
    (tmp_path / ".clusterlaunchignore").write_text("*.ckpt\nfoo\\\n")

    def no_connect(*args: object, **kwargs: object) -> None:
        raise AssertionError("connected")

    monkeypatch.setattr("clusterlaunch.controller.launcher.connect", no_connect)
    code = main(["run", "--sync", "hosts.yaml", "train.py"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("clusterlaunch: error: ")
    assert ".clusterlaunchignore:2: 'foo\\\\'" in err, err


def test_sync_flag_reaches_the_request() -> None:
    from clusterlaunch.cli.main import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "--sync", "h", "s"]).sync is True
    assert parser.parse_args(["exec", "--sync", "h"]).sync is True
    assert parser.parse_args(["run", "h", "s"]).sync is False
    assert parser.parse_args(["check", "h"]).sync is False  # check has no --sync of its own


def test_a_name_that_is_not_utf8_is_refused_unless_ignored(tmp_path: Path) -> None:
    (tmp_path / os.fsdecode(b"caf\xe9.py")).write_text("")
    with pytest.raises(UsageError, match=r"caf\\xe9.py'.*not UTF-8"):
        scan_source(str(tmp_path))
    (tmp_path / ".clusterlaunchignore").write_text("caf*\n")
    assert [e.path for e in scan_source(str(tmp_path)).entries] == [".clusterlaunchignore"]
