"""The agent starts its job by hand (``remote/spawn.py``) as ``subprocess.Popen`` did.

Real processes: each test starts a short job and compares what it sees, or the
error, with what Popen gives for the same command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterlaunch.remote.spawn import Job, StartFailed, start_job
from tests.binaries import foreign_elf, foreign_elf_runs_here

PROBE = "import os, sys; print(repr((%s))); sys.stdout.flush()"


def finish(job: Job, timeout: float = 10) -> tuple[bytes, bytes, int]:
    """The job's stdout, stderr and return code, once it has ended."""
    out, err = job.stdout.read(), job.stderr.read()
    deadline = time.monotonic() + timeout
    while job.poll() is None:
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.005)
    job.stdout.close()
    job.stderr.close()
    assert job.returncode is not None
    return out, err, job.returncode


def python_job(expression: str) -> Job:
    return start_job([sys.executable, "-S", "-c", PROBE % expression], dict(os.environ))


def test_output_goes_to_two_pipes_and_the_status_is_the_exit_code() -> None:
    job = start_job(["sh", "-c", "echo out; echo err >&2; exit 3"], dict(os.environ))
    assert finish(job) == (b"out\n", b"err\n", 3)


def test_a_job_ended_by_a_signal_returns_minus_the_signal() -> None:
    job = start_job(["sh", "-c", "kill -TERM $$"], dict(os.environ))
    assert finish(job)[2] == -signal.SIGTERM


def test_the_job_leads_a_session_of_its_own_with_stdin_from_dev_null() -> None:
    job = python_job("os.getsid(0) == os.getpid(), os.readlink('/proc/self/fd/0')")
    assert finish(job)[0] == b"(True, '/dev/null')\n"


def test_the_job_gets_the_given_environment_and_is_found_on_its_path(tmp_path: Path) -> None:
    (tmp_path / "show-env").symlink_to("/usr/bin/env")
    env = {"PATH": f"/nowhere:{tmp_path}", "ONLY": "th is\nthat"}
    job = start_job(["show-env"], env)
    assert finish(job)[0] == b"PATH=/nowhere:%s\nONLY=th is\nthat\n" % bytes(tmp_path)


def test_the_job_inherits_no_other_descriptor_and_no_ignored_sigpipe(tmp_path: Path) -> None:
    stray = os.open(tmp_path / "stray", os.O_WRONLY | os.O_CREAT)
    os.set_inheritable(stray, True)  # as a parent shell may leave one open
    ignored = signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # Python's own setting: not passed on
    try:
        # Not a Python job: Python ignores SIGPIPE itself.
        job = start_job(["ls", "/proc/self/fd"], dict(os.environ))
        status = start_job(["grep", "^SigIgn", "/proc/self/status"], dict(os.environ))
    finally:
        signal.signal(signal.SIGPIPE, ignored)
        os.close(stray)
    assert sorted(finish(job)[0].split(), key=int) == [b"0", b"1", b"2", b"3"]  # 3: ls's own
    ignored_mask = int(finish(status)[0].split()[1], 16)
    assert ignored_mask & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)) == 0


def test_the_job_inherits_the_descriptors_passed_and_the_agent_s_copies_close() -> None:
    """A node's release pipe (``remote/storewait.py``): the job reads it, the agent writes."""
    read, write = os.pipe()  # close-on-exec, as os.pipe makes them
    reading = [sys.executable, "-S", "-c", PROBE % f"os.read({read}, 8)"]
    job = start_job(reading, dict(os.environ), (read,))
    with pytest.raises(OSError):
        os.fstat(read)  # handed over: only the job has it now
    os.write(write, b"go\n")
    os.close(write)
    assert finish(job) == (b"b'go\\n'\n", b"", 0)


@pytest.mark.parametrize(
    ("kind", "status"), [("missing", 127), ("not executable", 126), ("a directory", 126)]
)
def test_an_exec_failure_is_reported_as_a_shell_reports_it(
    tmp_path: Path, kind: str, status: int
) -> None:
    """127 not found, 126 found but not executable (bash and dash: a directory, no x bit);
    the words are Popen's, but for a directory, which the kernel calls permission denied."""
    program = tmp_path / "program"
    if kind == "not executable":
        program.write_text("#!/bin/sh\n")
    elif kind == "a directory":
        program.mkdir()
    argv = [str(program), "--flag"]
    by_shell = subprocess.run(["sh", "-c", '"$@"', "sh", *argv], capture_output=True)
    with pytest.raises(OSError) as popen:
        subprocess.Popen(argv, stdout=subprocess.PIPE)
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(StartFailed) as ours:
        start_job(argv, dict(os.environ))
    said = f"{program} is a directory" if kind == "a directory" else str(popen.value)
    assert (ours.value.status, str(ours.value)) == (by_shell.returncode, said) == (status, said)
    assert set(os.listdir("/proc/self/fd")) == before  # no pipe left open here


def test_a_file_without_a_shebang_line_is_run_by_sh_as_a_shell_runs_it(tmp_path: Path) -> None:
    program = tmp_path / "no-shebang"
    program.write_text('echo "ran as $0 with $1"\n')
    program.chmod(0o755)
    by_shell = subprocess.run(["sh", "-c", '"$@"', "sh", str(program), "x"], capture_output=True)
    out, err, code = finish(start_job([str(program), "x"], dict(os.environ)))
    assert (out, err, code) == (by_shell.stdout, b"", 0)
    assert out == b"ran as %s with x\n" % bytes(program)
    assert finish(start_job(["no-shebang", "y"], {"PATH": str(tmp_path)}))[0].endswith(b"y\n")


BINARIES = {"foreign ELF": None, "ELF magic": b"\x7fELF echo ran\n", "NUL": b"echo ran\0\n"}


@pytest.mark.parametrize("kind", BINARIES)
def test_a_binary_the_kernel_refuses_is_not_run_by_sh(tmp_path: Path, kind: str) -> None:
    """bash (ssh's shell) refuses a file that looks binary (126, "cannot execute binary
    file"), where /bin/sh would read its bytes as commands; a NUL past the first line is a
    script's, run by /bin/sh."""
    if kind == "foreign ELF" and foreign_elf_runs_here():
        pytest.skip("a binfmt_misc handler (qemu-user) runs it here")
    program = tmp_path / "program"
    program.write_bytes(BINARIES[kind] or foreign_elf())
    program.chmod(0o755)
    by_bash = subprocess.run(["bash", "-c", '"$@"', "bash", str(program)], capture_output=True)
    with pytest.raises(StartFailed) as ours:
        start_job([str(program)], dict(os.environ))
    said = "cannot execute binary file: Exec format error"
    assert (ours.value.status, str(ours.value)) == (by_bash.returncode, said) == (126, said)
    assert by_bash.stderr.decode().endswith(f"{program}: {said}\n")
    program.write_bytes(b"echo ran\n\0\n")
    assert finish(start_job([str(program)], dict(os.environ)))[0::2] == (b"ran\n", 0)


@pytest.mark.parametrize("named", ["by path", "on PATH"])
def test_a_missing_shebang_interpreter_is_named(tmp_path: Path, named: str) -> None:
    program = tmp_path / "bad"
    program.write_text("#!/nonexistent/interp -x\necho no\n")
    program.chmod(0o755)
    by_shell = subprocess.run(["sh", "-c", str(program)], capture_output=True)
    argv, env = ([str(program)], {}) if named == "by path" else (["bad"], {"PATH": str(tmp_path)})
    with pytest.raises(StartFailed) as ours:
        start_job(argv, env)
    assert ours.value.status == by_shell.returncode == 127
    assert str(ours.value) == "its #! interpreter /nonexistent/interp is not found; fix its #! line"


def test_the_path_is_searched_as_execvpe_does(tmp_path: Path) -> None:
    """A folder whose copy cannot run is passed over; that error is raised when no
    folder has one that runs (not the later "not found"). No PATH: os.defpath."""
    blocked, good = tmp_path / "blocked", tmp_path / "good"
    for folder in (blocked, good):
        folder.mkdir()
        (folder / "tool").write_text("#!/bin/sh\necho from $0\n")
    (good / "tool").chmod(0o755)
    path = f"{tmp_path / 'none'}:{blocked}:{good}"
    assert finish(start_job(["tool"], {"PATH": path}))[0] == b"from %s\n" % bytes(good / "tool")
    with pytest.raises(StartFailed, match="Permission denied") as denied:
        start_job(["tool"], {"PATH": f"{blocked}:{tmp_path / 'none'}"})
    with pytest.raises(StartFailed, match="No such file") as missing:
        start_job(["tool"], {"PATH": str(tmp_path / "none")})
    assert (denied.value.status, missing.value.status) == (126, 127)
    assert finish(start_job(["sh", "-c", "echo $0"], {}))[0] == b"sh\n"


def test_an_argument_exec_refuses_is_an_error_not_a_hang() -> None:
    with pytest.raises(OSError, match="embedded null byte"):
        start_job(["sh", "-c", "true", "a\0b"], dict(os.environ))


def test_poll_reaps_once_and_keeps_the_code() -> None:
    job = start_job(["sh", "-c", "exit 7"], dict(os.environ))
    assert finish(job)[2] == 7
    assert (job.poll(), job.poll()) == (7, 7)
