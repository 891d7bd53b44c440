"""A rank that exits with a code that looks like a stop (124, 130, 137, 143) failed.

Only what clusterlaunch itself does (its ``--timeout``, signals it receives,
``clusterlaunch kill``) is reported as "job stopped"; an OOM-killed rank
(SIGKILL, 137) is a failure, with its rank and its last lines.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from clusterlaunch.testing.orphans import find_processes
from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

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


def test_a_torchrun_killed_on_its_host_is_named_with_the_signal(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    """``kill -KILL`` of node1's torchrun: the summary was 'node1 exited with code 137' over
    torchrun's last warning (unrelated), nothing like clusterlaunch kill's 137 said."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    process = start_cli("run", sim_cluster, "--grace", "2", str(hosts), "sleeper.py")
    try:
        wait_for_lines(process, b" up", 2, timeout=120)
        node1 = find_processes([sim_cluster.host("node1").marker])
        workers = [p for p in node1 if p.cmdline.split()[1:] == ["-u", "sleeper.py"]]
        assert len(workers) == 1, [p.cmdline[:100] for p in node1]
        os.kill(workers[0].ppid, signal.SIGKILL)  # torchrun, the worker's parent
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = err.decode()
    assert process.returncode == 137, text[-2000:]
    summary = "clusterlaunch: job failed: torchrun on node1 was killed by SIGKILL, not by "
    assert text.endswith(summary + "clusterlaunch (exit code 137)\n"), text[-2000:]
    assert_no_orphans(sim_cluster, timeout=5.0)
