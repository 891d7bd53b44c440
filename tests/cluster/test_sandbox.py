"""``clusterlaunch sandbox up|down``: real sshd hosts, the printed commands, a clean ``down``.

The commands are taken from what ``up`` prints (parsed with ``shlex``), not
rebuilt here, so the test proves that what a user copies actually works.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.defaults import SANDBOX_DIR
from clusterlaunch.testing import find_processes, sandbox, sandboxtext, stop_detached
from clusterlaunch.testing.loopback import SSHD
from clusterlaunch.testing.orphans import is_alive
from tests.cluster.support import PYTHON, rank_lines

pytestmark = [pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    # This checkout's package, whatever else is installed.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", **extra}


def _clusterlaunch(
    cwd: Path, *args: str, timeout: float = 120, umask: int = -1, **env: str
) -> subprocess.CompletedProcess[str]:
    """``clusterlaunch ARGS`` as a user would type it, run as ``python -m clusterlaunch``
    (``umask``: under that umask; -1, ours)."""
    return subprocess.run(
        [PYTHON, "-m", "clusterlaunch", *args],
        cwd=cwd,
        env=_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        umask=umask,
    )


def _printed(stdout: str, start: str) -> list[str]:
    """The argv of the one printed line that starts with ``start``."""
    found = [line.strip() for line in stdout.splitlines() if line.strip().startswith(start)]
    assert len(found) == 1, stdout
    return shlex.split(found[0])


@pytest.mark.torch
def test_up_run_the_printed_commands_then_down(tmp_path: Path) -> None:
    if not os.access(SSHD, os.X_OK):
        pytest.skip(f"{SSHD} not installed (package openssh-server)")
    directory = tmp_path / SANDBOX_DIR
    try:
        up = _clusterlaunch(tmp_path, "sandbox", "up", "--hosts", "3")
        assert up.returncode == 0, up.stderr
        state = json.loads((directory / "simcluster.json").read_text())
        pids = [host["pid"] for host in state["hosts"]]
        markers = [host["marker"] for host in state["hosts"]]
        assert len(pids) == 3 and all(is_alive(pid) for pid in pids)
        assert "python: " + json.dumps(PYTHON) in (directory / "hosts.yaml").read_text()

        run = _printed(up.stdout, "clusterlaunch run ")
        assert run[1:4] == ["run", "--ssh-config", ".sandbox/ssh_config"]
        assert run[-1].endswith("examples/hello_ranks.py")
        job = _clusterlaunch(tmp_path, *run[1:])
        assert job.returncode == 0, job.stderr
        lines = rank_lines(job.stdout)
        assert [(rank, host) for rank, host, _, _ in sorted(lines)] == [
            (0, "node0"),
            (1, "node1"),
            (2, "node2"),
        ]
        assert all("WORLD_SIZE=3 " in text and "backend=gloo" in text for *_, text in lines)

        exe = _printed(up.stdout, "clusterlaunch exec ")
        hello = _clusterlaunch(tmp_path, *exe[1:])
        assert hello.returncode == 0, hello.stderr
        for marker in markers:
            assert marker in hello.stdout

        again = _clusterlaunch(tmp_path, "sandbox", "up", "--hosts", "3")
        assert again.returncode == 0, again.stderr
        assert "already up" in again.stdout
        assert json.loads((directory / "simcluster.json").read_text())["hosts"] == state["hosts"]
        other = _clusterlaunch(tmp_path, "sandbox", "up", "--hosts", "2")
        assert other.returncode == 2 and "sandbox down first" in other.stderr

        # Something left running through a host: down must find and kill it.
        ssh = _printed(up.stdout, "ssh ")
        detached = "setsid sleep 300 >/dev/null 2>&1 </dev/null &"
        subprocess.run([*ssh, detached], cwd=tmp_path, check=True, timeout=30)
        down = _clusterlaunch(tmp_path, *_printed(up.stdout, "clusterlaunch sandbox down")[1:])
        assert down.returncode == 0, down.stderr
        assert f"stopped 3 sshd (pid {', '.join(map(str, pids))})" in down.stdout
        assert "killed 1 leftover process(es)" in down.stdout and "sleep 300" in down.stdout
        assert not directory.exists()
        assert not [pid for pid in pids if is_alive(pid)]
        assert find_processes(markers) == []

        gone = _clusterlaunch(tmp_path, "sandbox", "down")
        assert gone.returncode == 0 and "nothing to stop" in gone.stdout
    finally:
        if (directory / "simcluster.json").exists():
            stop_detached(directory)


def test_up_without_sshd_exits_2_with_the_hint(tmp_path: Path) -> None:
    missing = str(tmp_path / "no" / "sshd")
    result = _clusterlaunch(tmp_path, "sandbox", "up", **{sandbox.SSHD_ENV: missing})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr  # one line
    assert missing in result.stderr
    assert "sudo apt-get install openssh-server" in result.stderr
    assert not (tmp_path / SANDBOX_DIR).exists()


def test_up_refuses_a_directory_that_is_not_a_sandbox(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    for action in ("up", "down"):
        result = _clusterlaunch(tmp_path, "sandbox", action, "--dir", "mine")
        assert result.returncode == 2, result.stderr
        assert "not a sandbox" in result.stderr
    assert (mine / "notes.txt").read_text() == "keep me\n"


def test_up_under_umask_000_lets_no_other_user_write_a_login_key(tmp_path: Path) -> None:
    """authorized_keys and sshd_config were 0666 in a 0777 directory, and sshd runs with
    StrictModes no: any local user could add a key and log in as the sandbox's user."""
    if not os.access(SSHD, os.X_OK):
        pytest.skip(f"{SSHD} not installed (package openssh-server)")
    directory = tmp_path / "made" / "box"
    try:
        up = _clusterlaunch(tmp_path, "sandbox", "up", "--hosts", "1", "--dir", "made/box", umask=0)
        assert up.returncode == 0, up.stderr
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert stat.S_IMODE((tmp_path / "made").stat().st_mode) & 0o022 == 0
        for name in ("authorized_keys", "node0/sshd_config", "ssh_config", "hosts.yaml"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
        others_may_write = [
            str(path) for path in (directory, *directory.rglob("*")) if path.lstat().st_mode & 0o022
        ]
        assert others_may_write == []
    finally:
        if (directory / "simcluster.json").exists():
            stop_detached(directory)


def test_up_refuses_a_directory_others_may_swap(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may rename the sandbox away and make their own
    try:
        result = _clusterlaunch(tmp_path, "sandbox", "up", "--dir", "shared/box")
    finally:
        if (shared / "box" / "simcluster.json").exists():  # it started: stopped again
            stop_detached(shared / "box")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"clusterlaunch: error: --dir {shared}/box: others may write in {shared} (mode 0777), "
        "so they could replace the sandbox's login keys and log in as you; "
        f"chmod go-w {shared}, or choose another --dir\n"
    )
    assert not (shared / "box").exists()


def test_printed_paths_are_relative_inside_the_checkout(tmp_path: Path) -> None:
    box = sandbox.Sandbox(
        ROOT / SANDBOX_DIR,
        [{"name": "node0", "addr": "127.0.0.11", "port": 22220, "pid": 1}],
    )
    text = sandboxtext.up_text(box, ROOT)
    run = _printed(text, "clusterlaunch run ")
    config, hosts, script = ".sandbox/ssh_config", ".sandbox/hosts.yaml", "examples/hello_ranks.py"
    assert run[2:] == ["--ssh-config", config, hosts, script]
    assert _printed(text, "clusterlaunch sandbox down") == ["clusterlaunch", "sandbox", "down"]
    spaced = sandbox.Sandbox(tmp_path / "my box", box.hosts)
    down = _printed(sandboxtext.up_text(spaced, tmp_path), "clusterlaunch sandbox down")
    assert down[-2:] == ["--dir", "my box"]
