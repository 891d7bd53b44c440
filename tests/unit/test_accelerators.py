"""Accelerators: the probe's parsers on recorded tool output, gpus: auto, the devices variable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core import accelerators
from clusterlaunch.core.defaults import SETUP_TIMEOUT_S
from clusterlaunch.core.errors import HostsFileError, UsageError
from clusterlaunch.core.hostfile import parse_inventory
from clusterlaunch.core.model import HostSpec, Inventory, NodePlan, SshTarget
from clusterlaunch.core.setupguard import SetupGuard
from clusterlaunch.remote import accel

DATA = Path(__file__).parent / "data" / "accel"


@pytest.mark.parametrize(
    ("tool", "sample", "indices"),
    [
        ("nvidia-smi", "nvidia-smi.txt", [0, 1, 2, 3]),
        ("amd-smi", "amd-smi.txt", [0, 1]),
        ("rocm-smi", "rocm-smi.txt", [0, 1, 2]),
        ("npu-smi", "npu-smi.txt", [0, 1, 2, 3]),  # the Mcu rows are no devices
        ("npu-smi", "npu-smi-two-die.txt", [0, 1, 2, 3]),  # logic IDs, not NPU IDs 0-1
    ],
)
def test_parsers_read_recorded_output(tool: str, sample: str, indices: list[int]) -> None:
    assert accel.PARSERS[tool]((DATA / sample).read_text()) == indices


@pytest.mark.parametrize("tool", sorted(accel.PARSERS))
def test_parsers_find_nothing_in_an_error_text(tool: str) -> None:
    assert accel.PARSERS[tool]("dcmi model initialized failed\nNo devices were found\n") == []


def test_the_probe_and_the_planner_share_one_table() -> None:
    assert accel.VISIBLE_DEVICES == accelerators.VISIBLE_DEVICES
    tools: dict[str, tuple[str, ...]] = {}
    for kind, tool, _ in accel.TOOL_RUNS:
        tools[kind] = (*tools.get(kind, ()), tool)
    assert tools == accelerators.TOOLS


def fake_tools(tmp_path: Path, **outputs: str) -> str:
    """A PATH holding only the named tools, each printing its recorded output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, sample in outputs.items():
        tool = bin_dir / name.replace("_", "-")
        tool.write_text(f"#!/bin/sh\nexec {shutil.which('cat')} {DATA / sample}\n")
        tool.chmod(0o755)
    return str(bin_dir)


def test_detection_order_and_declared_accelerator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", fake_tools(tmp_path, npu_smi="npu-smi.txt", rocm_smi="rocm-smi.txt"))
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    assert accel.find_devices() == {
        "accelerator": "rocm",
        "tool": "rocm-smi",
        "gpus": [0, 1, 2],
        "visible": None,
    }
    assert accel.find_devices("npu") == {
        "accelerator": "npu",
        "tool": "npu-smi",
        "gpus": [0, 1, 2, 3],
        "visible": "0,1",
    }
    assert accel.find_devices("cuda")["gpus"] is None  # no nvidia-smi: a CPU host


def test_a_failing_tool_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    assert accel.find_devices()["gpus"] == {"error": "NVIDIA-SMI has failed", "code": 9}


def node(nproc: int | None, devices: tuple[int, ...] | None = None) -> NodePlan:
    target = SshTarget(alias="h", hostname="h")
    guard = SetupGuard(SETUP_TIMEOUT_S)
    return NodePlan(
        0, "h", target, "h", nproc, 0, {}, "/w", "py", None, (), "", (), guard, devices=devices
    )


@pytest.mark.parametrize(
    ("nproc", "devices", "static", "problems"),
    [
        (2, None, {"gpus": None}, []),  # no tool: a CPU host, as before
        (2, None, {"gpus": [0, 1], "tool": "nvidia-smi"}, []),
        (
            4,
            None,
            {"gpus": [0, 1], "tool": "npu-smi"},
            ["needs device(s) [0, 1, 2, 3] but npu-smi lists [0, 1]; lower gpus: or fix devices:"],
        ),
        (1, (3,), {"gpus": [0, 1], "tool": "rocm-smi"}, ["needs device(s) [3] but rocm-smi lists"]),
        (None, None, {"gpus": [0, 1]}, []),
        (
            None,
            None,
            {"gpus": None, "accelerator": None},
            ["gpus: auto, but no nvidia-smi, amd-smi, rocm-smi or npu-smi found on this host"],
        ),
        (
            None,
            None,
            {"gpus": None, "accelerator": "npu"},
            ["gpus: auto, but no npu-smi found on this host; set gpus: N"],
        ),
        (
            None,
            None,
            {"gpus": [0, 1], "tool": "nvidia-smi", "visible": ""},
            ["gpus: auto, but CUDA_VISIBLE_DEVICES='' in the host's environment hides every"],
        ),
        (None, None, {"gpus": {"error": "boom"}, "tool": "amd-smi"}, ["amd-smi failed: boom"]),
    ],
)
def test_judge(
    nproc: int | None, devices: tuple[int, ...] | None, static: dict, problems: list[str]
) -> None:
    found = accelerators.judge(node(nproc, devices), static)
    assert len(found) == len(problems)
    for line, start in zip(found, problems, strict=True):
        assert line.startswith(start), line


def test_auto_counts_respect_the_hosts_visible_devices() -> None:
    assert accelerators.auto_count({"gpus": [0, 1, 2, 3]})[0] == 4
    assert accelerators.auto_count({"gpus": [0, 1, 2, 3], "visible": "0,2"})[0] == 2
    assert accelerators.auto_count({"gpus": [0, 1, 2, 3], "visible": "GPU-3f2a,GPU-9c1b"})[0] == 2


def test_resolve_fills_counts_and_detected_accelerators() -> None:
    inventory = Inventory(
        "h",
        (
            HostSpec(host="a", gpus=None),
            HostSpec(host="b", gpus=2, devices=(0, 1)),
            HostSpec(host="c", gpus=1, accelerator="cuda"),
        ),
    )
    assert accelerators.needs_resolving(inventory)
    statics = [
        {"gpus": [0, 1, 2, 3], "accelerator": "npu"},
        {"gpus": [0, 1], "accelerator": "rocm"},
        {"gpus": [0], "accelerator": "npu"},
    ]
    resolved = accelerators.resolve(inventory, statics)
    assert [(s.gpus, s.accelerator) for s in resolved.hosts] == [
        (4, "npu"),
        (2, "rocm"),
        (1, "cuda"),  # declared: kept
    ]
    assert not accelerators.needs_resolving(resolved)
    many = Inventory("h", tuple(HostSpec(host=f"n{i}", gpus=None) for i in range(65)))
    with pytest.raises(UsageError, match="gives 66,560 ranks"):
        accelerators.resolve(many, [{"gpus": list(range(1024))}] * 65)


def test_hosts_file_keys() -> None:
    inventory = parse_inventory(
        "defaults: {gpus: auto, accelerator: npu}\n"
        "hosts:\n"
        "  - {host: a}\n"
        "  - {host: b, devices: [4, 5]}\n"
        "  - {host: c, gpus: 2, accelerator: rocm}\n",
        "h.yaml",
    )
    assert [(s.gpus, s.devices, s.accelerator) for s in inventory.hosts] == [
        (None, None, "npu"),
        (2, (4, 5), "npu"),  # gpus: auto with devices: is the devices' count
        (2, None, "rocm"),
    ]
    with pytest.raises(HostsFileError, match="accelerator: must be one of cuda, rocm, npu"):
        parse_inventory("hosts:\n  - {host: a, gpus: 1, accelerator: tpu}\n", "h.yaml")


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ssh_config").write_text("")
    return tmp_path


def dry_run(capsys: pytest.CaptureFixture[str], hosts: str, *flags: str) -> tuple[int, str]:
    argv = ["run", "--dry-run", "--ssh-config", "ssh_config", "--job-id", "j", *flags]
    code = main([*argv, hosts, "t.py"])
    return code, capsys.readouterr().out


@pytest.mark.parametrize(
    ("accelerator", "variable"),
    [
        ("cuda", "CUDA_VISIBLE_DEVICES"),
        ("rocm", "HIP_VISIBLE_DEVICES"),
        ("npu", "ASCEND_RT_VISIBLE_DEVICES"),
    ],
)
def test_devices_set_the_accelerators_variable(
    work: Path, capsys: pytest.CaptureFixture[str], accelerator: str, variable: str
) -> None:
    (work / "h.yaml").write_text(
        f"hosts:\n  - {{host: a, gpus: 2, devices: [1, 3], accelerator: {accelerator}}}\n"
    )
    code, out = dry_run(capsys, "h.yaml", "--json")
    assert code == 0
    env = json.loads(out)["nodes"][0]["env"]
    assert env[variable] == "1,3"
    assert not set(env) & (set(accelerators.VISIBLE_DEVICES.values()) - {variable})


def test_dry_run_shows_auto_and_says_it_is_resolved_at_launch(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "h.yaml").write_text(
        "master_port: 29500\nhosts:\n  - {host: a, gpus: 2}\n  - {host: b, gpus: auto}\n"
        "  - {host: c, gpus: 1}\n"
    )
    code, out = dry_run(capsys, "h.yaml")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == "job j: 3 host(s), world size auto, master a:29500"
    assert "resolved at launch by the preflight" in lines[1]
    rows = [line.split()[:5] for line in lines[4:7]]
    assert rows == [["0", "a", "a", "2", "0-1"], ["1", "b", "b", "auto", "auto"],
                    ["2", "c", "c", "1", "auto"]]  # fmt: skip
    commands = [line for line in lines if line.startswith("cd -- ")]
    assert "--nproc-per-node AUTO" in commands[1] and "--first-rank AUTO" in commands[2]
    code, out = dry_run(capsys, "h.yaml", "--json")
    plan = json.loads(out)
    assert plan["world_size"] == "auto"
    assert [(n["nproc"], n["global_ranks"]) for n in plan["nodes"]] == [
        (2, [0, 1]),
        ("auto", None),
        (1, None),
    ]


def test_gpus_per_host_auto(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "h.yaml").write_text("hosts:\n  - {host: a, gpus: 8}\n")
    code, out = dry_run(capsys, "h.yaml", "--json", "--gpus-per-host", "auto")
    assert (code, json.loads(out)["nodes"][0]["nproc"]) == (0, "auto")
    code, out = dry_run(capsys, "h.yaml", "--gpus-per-host", "0")
    assert code == 2


def test_env_may_not_set_any_devices_variable(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "h.yaml").write_text(
        "hosts:\n  - {host: a, gpus: 1, env: {HIP_VISIBLE_DEVICES: '0'}}\n"
    )
    assert main(["run", "--dry-run", "h.yaml", "t.py"]) == 2
    assert "HIP_VISIBLE_DEVICES is set from each host's devices: list" in capsys.readouterr().err
