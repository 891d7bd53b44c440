"""A host's device tool run by the probe: one that hangs, one that fails."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from clusterlaunch.core import accelerators
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, NodePlan, SshTarget
from clusterlaunch.core.planner import plan_job
from clusterlaunch.remote import accel


def tool(tmp_path: Path, name: str, body: str) -> Path:
    """An executable ``name`` in ``tmp_path/bin`` running ``body`` with /bin/sh."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def running(pid: int) -> bool:
    """``pid`` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_tool_past_its_time_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """subprocess.run's timeout killed the tool alone: its child slept on, reparented to 1."""
    pid_file = tmp_path / "child.pid"
    hung = tool(tmp_path, "nvidia-smi", f"sleep 60 &\necho $! > {pid_file}\nwait\n")
    started = time.monotonic()
    found = accel._run(str(hung), [], accel.parse_nvidia_smi, timeout=1)
    assert time.monotonic() - started < 5
    assert found == {"gpus": {"error": "no answer within 1 s; it was stopped"}}
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child)


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("echo 'No devices were found'\nexit 6\n", {"error": "No devices were found", "code": 6}),
        (
            "echo out\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n",
            {"error": "NVIDIA-SMI has failed"},
        ),
        ("printf 'a\\nb\\nc\\nd\\n' >&2\nexit 4\n", {"error": "b\nc\nd", "code": 4}),
        ("exit 3\n", {"error": "", "code": 3}),
        ("kill -9 $$\n", {"error": "", "code": 137}),
    ],
)
def test_a_failing_tool_says_what_it_printed_and_its_status(
    tmp_path: Path, body: str, failure: dict
) -> None:
    """stderr, else stdout (nvidia-smi's "No devices were found" is on stdout), last lines."""
    path = tool(tmp_path, "nvidia-smi", body)
    expected = {"code": 9, **failure}
    assert accel._run(str(path), [], accel.parse_nvidia_smi) == {"gpus": expected}


@pytest.mark.parametrize(
    ("failure", "line"),
    [
        ({"error": "No devices were found", "code": 6}, "nvidia-smi failed (exit 6): No devices"),
        ({"error": "", "code": 3}, "nvidia-smi failed (exit 3): no output"),
        (
            {"error": "line one\nline two\n\x1b[31mRED\x1b[0m", "code": 4},
            "nvidia-smi failed (exit 4): line one | line two | \\x1b[31mRED\\x1b[0m",
        ),
        ({"error": "no answer within 15 s; it was stopped"}, "nvidia-smi failed: no answer"),
    ],
)
def test_a_tool_failure_is_one_clean_line(failure: dict, line: str) -> None:
    node_static = {"gpus": failure, "tool": "nvidia-smi"}
    for nproc in (None, 1):  # gpus: auto, gpus: 1
        (problem,) = accelerators.judge(_node(nproc), node_static)
        assert problem.startswith(line) and problem.isprintable(), problem


def _node(nproc: int | None) -> NodePlan:
    plan = plan_job(
        Inventory("h", (HostSpec(host="a", gpus=nproc),)),
        [SshTarget(alias="a", hostname="a")],
        LaunchOptions(script="t.py"),
        job_id="j",
        local_env={},
        local_cwd="/w",
        agent_size=1,
    )
    return plan.nodes[0]
