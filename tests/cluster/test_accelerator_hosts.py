"""Device tools on simulated hosts: one that hangs, one that fails, what gpus: auto counts
under a visible-devices variable, and the variable exec gives devices:.

The hosts have no accelerators: fake ``nvidia-smi``/``npu-smi`` scripts first on the PATH
(``setup:``) stand for the tools; everything else is real (sshd, the CLI, torchrun).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from clusterlaunch.testing.orphans import is_alive
from tests.cluster.support import rank_lines, run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

ACCEL_DATA = Path(__file__).resolve().parents[1] / "unit" / "data" / "accel"


def tools(folder: Path, **bodies: str) -> str:
    """``setup:`` putting shell-script tools (``nvidia_smi="..."``) first on the PATH."""
    folder.mkdir()
    for name, body in bodies.items():
        path = folder / name.replace("_", "-")
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return f'export PATH="{folder}:$PATH"'


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
    while any(map(is_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(is_alive, children))


def test_a_failing_tool_is_one_line_with_what_it_said_and_its_status(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """``nvidia-smi failed:`` and nothing more for a message on stdout; a message of several
    lines spilled the row over three lines, with raw escapes reaching the terminal."""
    nothing = tools(tmp_path / "a", nvidia_smi="echo 'No devices were found'\nexit 6\n")
    escape = "printf 'line one\\nline two\\n\\033[31mRED\\033[0m\\n' >&2\nexit 4\n"
    noisy = tools(tmp_path / "b", nvidia_smi=escape)
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", "auto", {"setup": nothing}), ("node1", "auto", {"setup": noisy})],
    )
    checked = run_cli("check", sim_cluster, str(hosts), "show_env.py")
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert "\x1b" not in checked.stdout + checked.stderr
    (row0,) = host_row(checked.stdout, "node0")
    assert row0.endswith("nvidia-smi failed (exit 6): No devices were found"), row0
    (row1,) = host_row(checked.stdout, "node1")
    said = "nvidia-smi failed (exit 4): line one | line two | \\x1b[31mRED\\x1b[0m"
    assert row1.endswith(said), row1
    hosts = write_hosts(tmp_path / "one.yaml", [("node0", 1, {"setup": nothing})])
    ran = run_cli("run", sim_cluster, str(hosts), "show_env.py")
    assert ran.returncode == 2, ran.stderr
    assert "nvidia-smi failed (exit 6): No devices were found" in ran.stderr
    assert rank_lines(ran.stdout) == []


@pytest.mark.torch
def test_gpus_auto_counts_the_devices_torch_sees(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """With 4 GPUs listed, ``CUDA_VISIBLE_DEVICES=0,-1,1`` gave 3 ranks (torch sees one
    device: -1 ends the list) and ``1,1`` gave 2 (torch sees none: a repeat)."""
    path = tools(tmp_path / "bin", nvidia_smi="printf '0\\n1\\n2\\n3\\n'\n")
    setups = {name: f"{path}\nexport CUDA_VISIBLE_DEVICES={value}" for name, value in
              (("stop", "0,-1,1"), ("two", "2,0"), ("twice", "1,1"))}  # fmt: skip
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", "auto", {"setup": setups["stop"]}), ("node1", "auto", {"setup": setups["two"]})],
    )
    ran = run_cli("run", sim_cluster, str(hosts), "show_env.py")
    assert ran.returncode == 0, ran.stderr
    assert ", world size 3, master " in ran.stderr
    assert sorted((rank, host) for rank, host, *_ in rank_lines(ran.stdout)) == [
        (0, "node0"), (1, "node1"), (2, "node1"),
    ]  # fmt: skip
    hosts = write_hosts(tmp_path / "twice.yaml", [("node0", "auto", {"setup": setups["twice"]})])
    checked = run_cli("check", sim_cluster, str(hosts), "show_env.py")
    assert checked.returncode == 2, checked.stdout
    hidden = "gpus: auto, but CUDA_VISIBLE_DEVICES='1,1' in the host's environment hides every"
    assert hidden in checked.stdout, checked.stdout


@pytest.mark.torch
def test_exec_gives_devices_the_variable_a_run_gives_them(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """Without ``accelerator:``, exec set CUDA_VISIBLE_DEVICES on an Ascend host, where a
    run's ranks got ASCEND_RT_VISIBLE_DEVICES."""
    npu = tools(tmp_path / "npu", npu_smi=f"exec cat {ACCEL_DATA / 'npu-smi.txt'}\n")  # 4 NPUs
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 2, {"setup": npu, "devices": [1, 3]}), ("node1", 2, {"devices": [1, 3]})],
    )
    shown = run_cli("exec", sim_cluster, str(hosts), "--", "sh", "-c", "env | grep VISIBLE")
    assert shown.returncode == 0, shown.stderr
    assert sorted(shown.stdout.splitlines()) == [
        "[node0] ASCEND_RT_VISIBLE_DEVICES=1,3",
        "[node1] CUDA_VISIBLE_DEVICES=1,3",  # no tool: cuda's
    ]
    ran = run_cli("run", sim_cluster, str(hosts), "show_env.py")
    assert ran.returncode == 0, ran.stderr
    given = {
        (host, name, value)
        for _, host, _, text in rank_lines(ran.stdout)
        for name, value in json.loads(text.split("ENV=", 1)[1]).items()
        if name.endswith("VISIBLE_DEVICES") and value is not None
    }
    assert given == {("node0", "ASCEND_RT_VISIBLE_DEVICES", "1,3"),
                     ("node1", "CUDA_VISIBLE_DEVICES", "1,3")}  # fmt: skip
