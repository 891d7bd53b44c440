"""Device tools on simulated hosts: one that hangs.

The hosts have no accelerators: fake ``nvidia-smi``/``npu-smi`` scripts first on the PATH
(``setup:``) stand for the tools; everything else is real (sshd, the CLI, torchrun).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


def tools(folder: Path, **bodies: str) -> str:
    """``setup:`` putting shell-script tools (``nvidia_smi="..."``) first on the PATH."""
    folder.mkdir()
    for name, body in bodies.items():
        path = folder / name.replace("_", "-")
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return f'export PATH="{folder}:$PATH"'


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def host_row(stdout: str, host: str) -> list[str]:
    """check's table rows of ``host`` (a row that spilled over would be more than one)."""
    rows = [line for line in stdout.splitlines() if line.split()[1:2] == [host]]
    return rows + [line for line in stdout.splitlines() if line.startswith("  ")]


def test_a_tool_that_hangs_is_stopped_with_what_it_started(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """The tool was killed after 15 s and its child slept on under PID 1, for check and run;
    the row said ``Command '[...]' timed out after 15 seconds``."""
    pids = tmp_path / "pids"
    body = f"sleep 60 &\necho $! >> {pids}\nwait\n"
    setup = tools(tmp_path / "bin", nvidia_smi=body)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", "auto", {"setup": setup})])
    said = "nvidia-smi failed: no answer within 15 s; it was stopped"
    checked = run_cli("check", sim_cluster, str(hosts), "show_env.py")
    ran = run_cli("run", sim_cluster, str(hosts), "show_env.py")
    assert checked.returncode == ran.returncode == 2, checked.stdout + ran.stderr
    assert host_row(checked.stdout, "node0") == [host_row(checked.stdout, "node0")[0]]
    assert said in checked.stdout and said in ran.stderr, checked.stdout + ran.stderr
    children = [int(pid) for pid in pids.read_text().split()]
    assert len(children) == 2
    deadline = time.monotonic() + 3
    while any(map(running, children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(running, children))
