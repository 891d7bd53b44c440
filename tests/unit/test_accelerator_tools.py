"""A host's device tool run by the probe (a hung one, a failing one), what gpus: auto counts
from a visible-devices variable (torch's own reading), and exec's devices: variable."""

from __future__ import annotations

import random
import shlex
import time
from pathlib import Path

import pytest

from clusterlaunch.core import accelerators
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, NodePlan, SshTarget
from clusterlaunch.core.planner import plan_job
from clusterlaunch.remote import accel
from clusterlaunch.remote.teardown import job_environ
from clusterlaunch.remote.wire import parse_args
from clusterlaunch.testing.orphans import is_alive


def tool(tmp_path: Path, name: str, body: str) -> Path:
    """An executable ``name`` in ``tmp_path/bin`` running ``body`` with /bin/sh."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


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
    while is_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_alive(child)


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


VISIBLE = [
    "", "0", "0,1,2", "-1", "0,-1,1", "1,1", "3,2,1", "1gpu2,2ampere", " 1 , 2 ", "+1", "-0",
    "+", "-", "a,1", "1,a,2", "0,,1", ",0", "007", "1 2", "²", "١", "0x1",
    "GPU-abc,GPU-def", "GPU-abc,GPU-abc", "GPU-abc,1", "GPU-a, GPU-b", "MIG-x,MIG-y",
    "MIG-x,GPU-y", "GPU-", "gpu-abc",
]  # fmt: skip


def _torch_reads(monkeypatch: pytest.MonkeyPatch, value: str) -> list[int] | list[str] | None:
    torch_cuda = pytest.importorskip("torch.cuda")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    try:
        return torch_cuda._parse_visible_devices()
    except ValueError:
        return None


@pytest.mark.parametrize("value", VISIBLE)
def test_visible_devices_are_read_as_torch_reads_them(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    assert accelerators.torch_visible(value) == _torch_reads(monkeypatch, value)


def test_visible_devices_agree_with_torch_on_random_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chance = random.Random(2013)
    for _ in range(3000):
        value = "".join(chance.choices("0123+-, GPUMI-a", k=chance.randint(0, 9)))
        assert accelerators.torch_visible(value) == _torch_reads(monkeypatch, value), value


@pytest.mark.parametrize(
    ("visible", "count", "why"),
    [
        ("-1", 0, "CUDA_VISIBLE_DEVICES='-1' in the host's environment hides every device"),
        ("0,-1,1", 1, None),
        ("1,1", 0, "CUDA_VISIBLE_DEVICES='1,1' in the host's environment hides every device"),
        ("2,0", 2, None),
        ("0,9,1", 1, None),  # torch.cuda.device_count(): index 9 of 4 ends the list
        ("GPU-3f2a,GPU-9c1b", 2, None),
        ("+", 0, "torch cannot read CUDA_VISIBLE_DEVICES='+' in the host's environment"),
    ],
)
def test_auto_counts_what_torch_sees(visible: str, count: int, why: str | None) -> None:
    static = {"gpus": [0, 1, 2, 3], "tool": "nvidia-smi", "visible": visible}
    found, said = accelerators.auto_count(static)
    assert found == count
    if why is not None:
        assert said.startswith(why)
        (problem,) = accelerators.judge(_node(None), static)
        assert problem.startswith(f"gpus: auto, but {why}")


def test_exec_leaves_the_devices_variable_to_a_host_without_accelerator() -> None:
    """run's preflight detects the accelerator; exec has none, so its agent picks."""
    hosts = (
        HostSpec(host="a", gpus=2, devices=(1, 3)),
        HostSpec(host="b", gpus=2, devices=(1, 3), accelerator="npu"),
    )
    options = LaunchOptions(script="")
    targets = [SshTarget(alias=h.host, hostname=h.host) for h in hosts]
    common = {"job_id": "j", "local_env": {}, "local_cwd": "/w", "agent_size": 1}
    job = plan_job(Inventory("h", hosts), targets, options, exec_argv=["env"], **common)
    variables = set(accelerators.VISIBLE_DEVICES.values())
    assert not set(job.nodes[0].env) & variables
    assert job.nodes[0].agent_argv[-2:] == ("--devices", "1,3")
    assert "--devices 1,3 -- env" in job.nodes[0].command
    assert job.nodes[1].env["ASCEND_RT_VISIBLE_DEVICES"] == "1,3"
    assert "--devices" not in job.nodes[1].agent_argv
    run = plan_job(Inventory("h", hosts), targets, LaunchOptions(script="t.py"), **common)
    assert "--devices" not in run.nodes[0].agent_argv  # run: its plan is remade after the probe


def test_the_agent_sets_the_variable_of_the_tool_it_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    argv = shlex.split("--job-id j --node-rank 0 --grace 5 --heartbeat-timeout 15")
    args = parse_args([*argv, "--devices", "1,3", "--", "env"])
    assert job_environ({}, "T=1", args, False) == {
        "CLUSTERLAUNCH_AGENT": "1",
        "CUDA_VISIBLE_DEVICES": "1,3",  # no tool: cuda's, as a run's plan would have it
    }
    tool(tmp_path, "rocm-smi", "exit 0\n")
    tool(tmp_path, "npu-smi", "exit 0\n")
    assert accel.devices_environ("1,3") == {"HIP_VISIBLE_DEVICES": "1,3"}  # the probe's order
    assert accel.devices_environ(None) == {}
    no_devices = parse_args([*argv, "--", "env"])
    assert "HIP_VISIBLE_DEVICES" not in job_environ({}, "T=1", no_devices, False)
