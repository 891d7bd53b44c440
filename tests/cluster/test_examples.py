"""The examples in examples/ run unmodified through clusterlaunch across simulated hosts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.support import REPO, rank_lines, run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    # Heterogeneous on purpose: 2 processes on node0, 1 on node1.
    return write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 1)])


def test_hello_ranks(sim_cluster, hosts: Path) -> None:
    result = run_cli("run", sim_cluster, str(hosts), "examples/hello_ranks.py", cwd=REPO)
    assert result.returncode == 0, result.stderr
    seen = {rank: (host, local, text) for rank, host, local, text in rank_lines(result.stdout)}
    assert sorted(seen) == [0, 1, 2]
    for rank, (host, local, text) in seen.items():
        assert f"RANK={rank} LOCAL_RANK={local} WORLD_SIZE=3" in text
        assert "backend=gloo" in text and "device=cpu" in text
        assert host == ("node0" if rank < 2 else "node1")


def test_collectives(sim_cluster, hosts: Path) -> None:
    result = run_cli("run", sim_cluster, str(hosts), "examples/collectives.py", cwd=REPO)
    assert result.returncode == 0, result.stderr
    lines = [text for *_, text in rank_lines(result.stdout)]
    assert not [line for line in lines if "FAIL" in line]
    for name in ("send/recv", "broadcast", "reduce", "all_reduce", "all_gather"):
        assert any(name in line and "OK" in line for line in lines), name


def test_ddp_train_learns_and_checkpoints(sim_cluster, hosts: Path, tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt.pt"
    result = run_cli(
        "run", sim_cluster, str(hosts), "examples/ddp_train.py",
        "--epochs", "3", "--checkpoint", str(checkpoint), cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    losses = [float(m) for m in re.findall(r"loss[ =:]+([0-9.]+)", result.stdout)]
    assert len(losses) >= 3 and losses[-1] < losses[0]
    assert checkpoint.is_file()


def test_ddp_train_failure_demo_reports_the_rank(sim_cluster, hosts: Path, tmp_path: Path) -> None:
    result = run_cli(
        "run", sim_cluster, str(hosts), "examples/ddp_train.py",
        "--fail-at-epoch", "2", "--fail-rank", "2", "--checkpoint", str(tmp_path / "c.pt"),
        cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    assert "job failed: rank 2 on node1 exited with code 3" in result.stderr


def test_gpu_check_script_passes_on_cpu(tmp_path: Path) -> None:
    # scripts/gpu-check.sh is what was run on a GPU machine (examples/README.md); on a
    # machine without nvidia-smi it runs the same steps on 2 CPU processes, so that
    # what it checks (and that it checks at all) stays true between GPU runs.
    python = os.environ.get("CLUSTERLAUNCH_TEST_PYTHON", sys.executable)
    env = {**os.environ, "PYTHON": python}
    result = subprocess.run(
        ["bash", "scripts/gpu-check.sh", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    summary = (tmp_path / "summary.txt").read_text()
    assert result.returncode == 0, summary + (tmp_path / "gpu-check.log").read_text()[-4000:]
    verdicts = [line.split()[1] for line in summary.splitlines()]
    assert verdicts and set(verdicts) == {"ok"}, summary
    for step in ("hello_ranks", "all-checks-passed", "names-the-rank", "ctrl-c", "nothing-left"):
        assert step in summary, step
    assert summary.count("nothing-left") == 2 and summary.count("found-by-id") == 2
