"""The controller's own odd environment, said in one line with its fix (exit 2), never a
traceback: a current directory that was deleted, no temporary directory for the OpenSSH
client's sockets. Each runs the real program in a child, as a shell would start it;
nothing is contacted (every command stops before that)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests import mountns

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "hosts:\n  - {host: node0.invalid, gpus: 1}\n"


def _clusterlaunch(
    words: list[str],
    prefix: Sequence[str] = (),
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``clusterlaunch WORDS`` as a shell would start it (``prefix``: what runs it)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "clusterlaunch", *words],
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        preexec_fn=preexec_fn,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _in_deleted_directory(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """``clusterlaunch WORDS`` started in a directory the shell removed first."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    return _clusterlaunch(list(words), prefix=["sh", "-c", script, "sh", str(gone)])


@pytest.mark.parametrize(
    "words",
    [
        ["run", "--dry-run", "HOSTS", "/abs/train.py"],
        ["exec", "HOSTS", "true"],
        ["check", "HOSTS"],
        ["sandbox", "down", "--dir", "/nonexistent/box"],
    ],
)
def test_a_deleted_current_directory_is_named_with_its_fix(tmp_path, words):
    """Even with every path absolute: make_plan asked os.getcwd() for the default workdir,
    and its ENOENT was ``error: No such file or directory ([Errno 2] ...)``, exit 1."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    result = _in_deleted_directory(tmp_path, *[str(hosts) if w == "HOSTS" else w for w in words])
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"clusterlaunch: error: the current directory was deleted ({tmp_path / 'gone'}); "
        "cd to an existing directory\n"
    )


def _exec_over_openssh(tmp_path: Path) -> list[str]:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(HOSTS)
    return ["exec", "--ssh-client", "openssh", str(hosts), "true"]


def test_a_long_tmpdir_passed_over_is_said_when_tmp_fails_too(tmp_path):
    """TMPDIR too long for a socket path, /tmp read-only: the line named /tmp alone."""
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    long = Path("/dev/shm") / ("clusterlaunch-test-" + "t" * 40 + tmp_path.name)
    long.mkdir()
    try:
        read_only_tmp = 'mount --bind /tmp /tmp && mount -o remount,bind,ro /tmp && exec "$@"'
        prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-c", read_only_tmp)
        words = _exec_over_openssh(tmp_path)
        result = _clusterlaunch(words, prefix=[*prefix, "sh"], env={"TMPDIR": str(long)})
    finally:
        shutil.rmtree(long)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "clusterlaunch: error: --ssh-client openssh: cannot make ssh's control socket "
        f"directory in /tmp (Read-only file system); TMPDIR {long} was passed over: a socket "
        "path there would be too long; set TMPDIR to a short directory this user may write in\n"
    )


def test_no_usable_temporary_directory_is_one_line_exit_2(tmp_path):
    """ulimit -f 0: Python's tempfile finds no directory that takes a file."""

    def no_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    result = _clusterlaunch(_exec_over_openssh(tmp_path), preexec_fn=no_file_size)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "clusterlaunch: error: --ssh-client openssh: no directory for ssh's control sockets: "
        "No usable temporary directory found in ["
    )
    assert lines[0].endswith(
        "raise ulimit -f, or set TMPDIR to a short directory this user may write in"
    )
