"""A rank that exits with a code that looks like a stop (124, 130, 137, 143) failed.

Only what clusterlaunch itself does (its ``--timeout``, signals it receives,
``clusterlaunch kill``) is reported as "job stopped"; an OOM-killed rank
(SIGKILL, 137) is a failure, with its rank and its last lines.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]


@pytest.mark.parametrize(
    ("how", "code", "signal_name"),
    [("FAIL_SIGNAL=9", 137, " (SIGKILL)"), ("FAIL_CODE=130", 130, "")],
)
def test_rank_exit_that_looks_like_a_stop_is_a_failure(
    sim_cluster, tmp_path: Path, how: str, code: int, signal_name: str
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    failure = ["--env", "FAIL_RANK=1", "--env", how]
    result = run_cli("run", sim_cluster, *failure, str(hosts), "allreduce.py")
    assert result.returncode == code, result.stderr
    summary = f"job failed: rank 1 on node1 exited with code {code}{signal_name}"
    assert summary in result.stderr
    assert "job stopped" not in result.stderr
    assert "RANK=1 " in result.stderr.split("last ")[-1]  # the rank's own last lines
