"""HOSTS=slurm and the srun transport's command: pure functions, tested by equality."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostranges import HostRangeError
from clusterlaunch.core.model import HostSpec, Inventory, SshTarget
from clusterlaunch.core.slurm import (
    GPU_VARS,
    check_in_allocation,
    expand_counts,
    gpu_request,
    processes_per_node,
    slurm_inventory,
    srun_targets,
)
from clusterlaunch.core.slurmnodes import expand_nodelist, job_id, split_nodelist
from clusterlaunch.transport.srun import STEP_OPTIONS, srun_argv, srun_env
from tests.unit.test_cli import run


def hosts(*pairs: tuple[str, int]) -> tuple[HostSpec, ...]:
    return tuple(HostSpec(host=name, gpus=gpus) for name, gpus in pairs)


# -- the inventory ---------------------------------------------------------------


def test_gpu_ranges_and_gpus_on_node() -> None:
    env = {"SLURM_JOB_NODELIST": "gpu[01-03,07]", "SLURM_GPUS_ON_NODE": "8"}
    assert slurm_inventory(env, None) == Inventory(
        path="slurm", hosts=hosts(("gpu01", 8), ("gpu02", 8), ("gpu03", 8), ("gpu07", 8))
    )


def test_heterogeneous_tasks_per_node() -> None:
    env = {"SLURM_JOB_NODELIST": "node[1-3],big1", "SLURM_TASKS_PER_NODE": "2(x3),1"}
    assert slurm_inventory(env, None).hosts == hosts(
        ("node1", 2), ("node2", 2), ("node3", 2), ("big1", 1)
    )


def test_option_beats_environment() -> None:
    env = {
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_GPUS_ON_NODE": "8",
        "SLURM_TASKS_PER_NODE": "1(x2)",
    }
    assert slurm_inventory(env, 3).hosts == hosts(("n1", 3), ("n2", 3))


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"SLURM_GPUS_ON_NODE": "4", "SLURM_GPUS_PER_NODE": "8"}, [4, 4]),
        ({"SLURM_GPUS_PER_NODE": "a100:8", "SLURM_TASKS_PER_NODE": "1(x2)"}, [8, 8]),
        ({"SLURM_GPUS_PER_NODE": "a100:4,v100:2"}, [6, 6]),
        # salloc --ntasks-per-node=4 on a CPU partition: GPUs say 0, tasks decide.
        ({"SLURM_GPUS_ON_NODE": "0", "SLURM_TASKS_PER_NODE": "4(x2)"}, [4, 4]),
        ({"SLURM_TASKS_PER_NODE": "3,1"}, [3, 1]),
    ],
)
def test_where_the_process_count_comes_from(extra: dict[str, str], expected: list[int]) -> None:
    assert processes_per_node(extra, None, 2) == expected


def test_slurm_order_is_kept_across_parts() -> None:
    # ClusterShell would sort the whole set (a1 first); Slurm's order decides ranks.
    assert expand_nodelist("b[1-2],a1") == ["b1", "b2", "a1"]
    assert expand_nodelist("rack[1-2]-n[01-02]") == [
        "rack1-n01",
        "rack1-n02",
        "rack2-n01",
        "rack2-n02",
    ]
    assert expand_nodelist("localhost") == ["localhost"]


def test_split_nodelist() -> None:
    assert split_nodelist("a[1,3-4],b,c[2]") == ["a[1,3-4]", "b", "c[2]"]


def test_expand_counts() -> None:
    assert expand_counts("2(x3),1", "V") == [2, 2, 2, 1]
    assert expand_counts("8", "V") == [8]
    assert expand_counts("1,2(x1)", "V") == [1, 2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1(x999999999)", "V='1(x999999999)': more than 4,096 nodes, the limit for a job"),
        ("1(x4000),1(x97)", "more than 4,096 nodes"),
        ("1(x" + "9" * 5000 + ")", "cannot read '1(x9999"),  # no MemoryError, no int() limit
        ("9" * 5000, "expected counts like 2(x3),1"),
    ],
)
def test_hostile_counts_are_one_line(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        expand_counts(text, "V")
    assert message in str(info.value)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize(
    ("var", "text"), [(GPU_VARS[0], "9" * 5000), (GPU_VARS[1], "a:" + "9" * 5000)]
)
def test_hostile_gpu_counts_are_one_line(var: str, text: str) -> None:
    with pytest.raises(UsageError) as info:
        processes_per_node({var: text}, None, 2)
    assert len(str(info.value)) < 300


def test_gpu_request() -> None:
    assert gpu_request("8") == 8
    assert gpu_request("gpu:a100:2") == 2


@pytest.mark.parametrize(
    ("env", "gpus", "fragment"),
    [
        ({}, None, "not inside a Slurm allocation (SLURM_JOB_NODELIST unset); run under"),
        ({"SLURM_JOB_NODELIST": ""}, 1, "no nodes"),
        ({"SLURM_JOB_NODELIST": "n[1-2"}, 1, "SLURM_JOB_NODELIST='n[1-2': cannot read 'n[1-2'"),
        ({"SLURM_JOB_NODELIST": "vm]"}, 1, "SLURM_JOB_NODELIST='vm]': cannot read 'vm]'"),
        ({"SLURM_JOB_NODELIST": "n[1-3]x["}, 1, "cannot read 'n[1-3]x[' (unbalanced"),
        ({"SLURM_JOB_NODELIST": "n[1-[2]]"}, 1, "or nested brackets"),
        ({"SLURM_JOB_NODELIST": "n[a-b]"}, 1, "a range that is not numbers"),
        ({"SLURM_JOB_NODELIST": "-n1"}, 1, "node '-n1' starts with '-'"),
        ({"SLURM_JOB_NODELIST": "n1,-x[1-2]"}, 1, "node '-x1' starts with '-'"),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_ID": "0", "SLURM_TASKS_PER_NODE": "1"},
            None,
            "inside a job step (SLURM_STEP_ID='0'), whose SLURM_TASKS_PER_NODE and "
            "SLURM_GPUS_ON_NODE are the step's counts, not the allocation's: "
            "pass --gpus-per-host N",
        ),
        ({"SLURM_JOB_NODELIST": "n[1-2]^n1"}, 1, "unexpected characters"),
        ({"SLURM_JOB_NODELIST": "n1,,n2"}, 1, "empty entry"),
        ({"SLURM_JOB_NODELIST": "n[1-2],n1"}, 1, "lists node n1 twice"),
        ({"SLURM_JOB_NODELIST": "n1"}, None, "pass --gpus-per-host N"),
        ({"SLURM_JOB_NODELIST": "n1"}, 0, "--gpus-per-host 0: use a number of 1 or more"),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x3)"},
            None,
            "SLURM_TASKS_PER_NODE='2(x3)' gives 3 node(s) but SLURM_JOB_NODELIST has 2",
        ),
        (
            {"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "2(3)"},
            None,
            "SLURM_TASKS_PER_NODE='2(3)': cannot read '2(3)'",
        ),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "0"}, None, "zero count"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_ON_NODE": "eight"}, None, "expected a number"),
        ({"SLURM_JOB_NODELIST": "n1", "SLURM_GPUS_PER_NODE": "a100"}, None, "a GPU count"),
    ],
)
def test_bad_allocations_name_the_variable_and_the_fix(
    env: dict[str, str], gpus: int | None, fragment: str
) -> None:
    with pytest.raises(UsageError) as caught:
        slurm_inventory(env, gpus)
    message = str(caught.value)
    assert fragment in message
    assert "\n" not in message


def test_inside_a_step_the_step_counts_are_not_the_allocations() -> None:
    """salloc -N1 -n2, then srun -n1 bash: SLURM_TASKS_PER_NODE=1 and SLURM_GPUS_ON_NODE
    are the step's; the allocation's GPU request (SLURM_GPUS_PER_NODE) still holds."""
    step = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_STEP_ID": "0", "SLURM_TASKS_PER_NODE": "1"}
    assert processes_per_node({**step, "SLURM_GPUS_PER_NODE": "a100:4"}, None, 2) == [4, 4]
    on_node = {**step, "SLURM_GPUS_ON_NODE": "1", "SLURM_GPUS_PER_NODE": "8"}
    assert processes_per_node(on_node, None, 2) == [8, 8]
    assert processes_per_node(step, 3, 2) == [3, 3]  # --gpus-per-host
    with pytest.raises(UsageError, match="pass --gpus-per-host N"):
        processes_per_node({**step, "SLURM_GPUS_ON_NODE": "1"}, None, 2)
    outside = {"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "2"}  # salloc, sbatch
    assert processes_per_node(outside, None, 1) == [2]


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "not inside a Slurm allocation (SLURM_JOB_NODELIST unset)"),
        (
            {"SLURM_JOB_NODELIST": "vm"},
            "not inside a Slurm allocation (SLURM_JOB_ID unset, though SLURM_JOB_NODELIST is "
            "set: srun would make a new job for every node)",
        ),
        ({"SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID='abc': not a Slurm"),
        ({"SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "12_3"}, "SLURM_JOB_ID='12_3': not a"),
        ({"SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "-1"}, "SLURM_JOB_ID='-1': not a"),
        ({"SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "9" * 500}, "SLURM_JOB_ID='999"),
    ],
)
def test_the_job_id(env: dict[str, str], fragment: str) -> None:
    with pytest.raises(UsageError) as caught:
        job_id(env)
    assert fragment in str(caught.value) and len(str(caught.value)) < 400
    assert job_id({"SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "81234"}) == "81234"


def test_expand_is_pluggable_for_the_scontrol_fallback() -> None:
    def fake_expand(part: str) -> list[str]:
        if part == "odd[01-2]":
            return ["odd01", "odd02"]
        raise HostRangeError(part)

    env = {"SLURM_JOB_NODELIST": "odd[01-2]", "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert slurm_inventory(env, None, expand=fake_expand).hosts == hosts(("odd01", 1), ("odd02", 1))


def test_srun_targets_use_the_slurm_names() -> None:
    assert srun_targets(hosts(("gpu01", 1), ("localhost", 1))) == (
        SshTarget(alias="gpu01", hostname="gpu01", port=0),
        SshTarget(alias="localhost", hostname="localhost", port=0),
    )


def test_hosts_file_over_srun_must_name_allocated_nodes() -> None:
    env = {"SLURM_JOB_NODELIST": "gpu[1-2]"}
    check_in_allocation(Inventory("h.yaml", hosts(("gpu2", 1))), env)
    with pytest.raises(UsageError, match=r"h.yaml: gpu3, gpu4 not in this Slurm allocation"):
        check_in_allocation(Inventory("h.yaml", hosts(("gpu3", 1), ("gpu1", 1), ("gpu4", 1))), env)


# -- the srun command --------------------------------------------------------------


def test_srun_argv() -> None:
    command = "cd -- /w && exec env A='x y' python3 -c 'print(1)'"
    assert srun_argv("gpu07", command, "/bin/bash", "81234", "/usr/bin/srun") == [
        "/usr/bin/srun",
        "--jobid=81234",  # a step of this job: never a new job, whatever the environment
        "--nodes=1",
        "--ntasks=1",
        "--kill-on-bad-exit=1",
        "--overlap",
        "--cpu-bind=none",
        "--export=ALL",
        "--input=all",
        "--output=all",
        "--error=all",
        "--quiet",
        "--unbuffered",  # frames end without a newline: slurmstepd must not wait for one
        "-w",
        "gpu07",
        "/bin/bash",
        "-c",
        command,  # one argv word: srun execs it, no shell in between
    ]
    assert STEP_OPTIONS[:2] == ("--nodes=1", "--ntasks=1")


def test_srun_env_drops_what_would_reshape_the_step() -> None:
    env = {
        "PATH": "/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_LABELIO": "1",
        "SLURM_GPUS": "32",
        "SLURM_GPUS_PER_TASK": "1",
        "SLURM_NTASKS_PER_NODE": "8",
        "SLURM_GPUS_PER_NODE": "8",  # kept: it fits a one-node step
    }
    assert srun_env(env) == {"PATH": "/bin", "SLURM_JOB_ID": "7", "SLURM_GPUS_PER_NODE": "8"}


# -- the command line ------------------------------------------------------------


@pytest.fixture
def allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("SLURM_JOB_NODELIST", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
    monkeypatch.setenv("SLURM_JOB_ID", "81234")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "2(x2)")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def test_dry_run_slurm_plan(allocation: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "run", "--dry-run", "--json", "slurm", "train.py", "--lr", "1")
    assert code == 0, err
    plan = json.loads(out)
    assert plan["master_addr"] == "gpu01"
    assert [(n["host"], n["nproc"], n["global_ranks"]) for n in plan["nodes"]] == [
        ("gpu01", 2, [0, 1]),
        ("gpu02", 2, [2, 3]),
    ]
    words = shlex.split(plan["nodes"][1]["command"])
    assert words[-3:] == ["train.py", "--lr", "1"]


def test_dry_run_text_shows_the_srun_line(
    allocation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "run", "--dry-run", "slurm", "train.py")
    assert code == 0, err
    assert "srun --jobid=81234 --nodes=1 --ntasks=1" in out and "-w HOST" in out


def test_gpus_per_host_and_master_addr(
    allocation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys,
        "run",
        "--dry-run",
        "--json",
        "--gpus-per-host",
        "3",
        "--master-addr",
        "10.0.0.5",
        "slurm",
        "train.py",
    )
    assert code == 0, err
    plan = json.loads(out)
    assert plan["world_size"] == 6 and plan["master_addr"] == "10.0.0.5"


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--gpus-per-host", "x"], "--gpus-per-host 'x': use a whole number from 1 to 1,024"),
        (["--gpus-per-host", "\u0663"], "use a whole number from 1 to"),  # Arabic-Indic 3
        (["--master-addr", ""], "--master-addr '': is empty"),
        (["--transport", "rsh"], "invalid choice: 'rsh'"),
    ],
)
def test_bad_slurm_options(
    allocation: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    code, out, err = run(capsys, "run", "--dry-run", *argv, "slurm", "train.py")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and fragment in err, err


def test_gpus_per_host_replaces_a_hosts_files_gpus(
    allocation: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (allocation / "hosts.yaml").write_text("hosts:\n  - {host: gpu01, gpus: 1}\n")
    argv = ["run", "--dry-run", "--json", "--gpus-per-host", "2", "hosts.yaml", "train.py"]
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, "")
    assert [node["nproc"] for node in json.loads(out)["nodes"]] == [2]


def test_outside_an_allocation(
    allocation: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    code, out, err = run(capsys, "exec", "slurm", "--", "hostname")
    assert code == 2 and out == ""
    assert err == (
        "clusterlaunch: error: not inside a Slurm allocation (SLURM_JOB_NODELIST unset); "
        "run under salloc/sbatch or pass a hosts file\n"
    )


def test_no_srun_is_one_line_before_anything_starts(
    allocation: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(allocation))  # no srun there, whatever this machine has
    code, out, err = run(capsys, "run", "slurm", "train.py")
    assert code == 2 and out == ""
    assert err == (
        "clusterlaunch: error: srun not found on PATH: add Slurm's bin directory to PATH, "
        "or use --transport ssh\n"
    )
    code, out, err = run(capsys, "run", "--dry-run", "slurm", "train.py")
    assert code == 0 and "srun --jobid=81234 --nodes=1" in out, err  # a dry run only shows the line


@pytest.mark.parametrize("command", ["run", "exec"])
def test_sync_over_srun_is_one_line_before_anything_starts(
    allocation: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """rsync went to the nodes over SSH ("Connection refused" where only srun reaches them),
    SFTP said "this transport cannot copy files", after the job had begun."""
    tail = ["train.py"] if command == "run" else ["--", "true"]
    code, out, err = run(capsys, command, "--sync", "slurm", *tail)
    assert code == 2 and out == ""
    assert (
        err.startswith("clusterlaunch: error: --sync copies over SSH") and "--transport ssh" in err
    )


def test_hosts_file_over_srun(allocation: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (allocation / "hosts.yaml").write_text("hosts:\n  - {host: gpu02, gpus: 1}\n")
    code, out, err = run(
        capsys, "run", "--dry-run", "--json", "--transport", "srun", "hosts.yaml", "train.py"
    )
    assert code == 0, err
    assert json.loads(out)["master_addr"] == "gpu02"
    (allocation / "other.yaml").write_text("hosts:\n  - {host: cpu9, gpus: 1}\n")
    code, out, err = run(
        capsys, "run", "--dry-run", "--transport", "srun", "other.yaml", "train.py"
    )
    assert code == 2 and "other.yaml: cpu9 not in this Slurm allocation" in err
