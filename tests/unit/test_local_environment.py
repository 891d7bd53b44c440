"""The controller's own odd environment, said in one line with its fix (exit 2), never a
traceback: a current directory that was deleted. Each runs the real program in a child,
as a shell would start it; nothing is contacted (every command stops before that)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOSTS = "hosts:\n  - {host: node0.invalid, gpus: 1}\n"


def _in_deleted_directory(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    """``clusterlaunch WORDS`` started in a directory the shell removed first."""
    gone = tmp_path / "gone"
    gone.mkdir()
    script = 'cd "$1" && rmdir "$1" && shift && exec "$@"'
    argv = ["sh", "-c", script, "sh", str(gone), sys.executable, "-m", "clusterlaunch", *words]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


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
