"""``ps``/``kill`` tell apart two sshd on one address: hosts that differ by port only.

Two simulated clusters on 127.0.0.11-12 (another port each) share this machine's
job records. ``ps`` through one listed the other's job, every node under its own
node0, and ``kill`` through it stopped that job.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import pytest

from tests.cluster.support import (
    assert_every_agent_stopped,
    run_cli,
    start_cli,
    wait_for_lines,
    write_hosts,
)

pytestmark = [pytest.mark.cluster]


def test_a_job_of_another_sshd_on_the_same_address_is_not_ours(
    sim_cluster_factory, tmp_path: Path
) -> None:
    ours, theirs = sim_cluster_factory(2), sim_cluster_factory(2)
    assert ours.host("node0").addr == theirs.host("node0").addr and ours.port != theirs.port
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    job_id = f"theirs-{uuid.uuid4().hex[:8]}"
    command = ["sh", "-c", "echo up; sleep 600"]
    job = start_cli("exec", theirs, "--job-id", job_id, str(hosts), "--", *command)
    try:
        wait_for_lines(job, b"up", 2, timeout=60)
        rows = _ps_rows(theirs, hosts, job_id)
        assert rows == [("node0", 0), ("node1", 1)]  # each node once, on its own host
        assert _ps_rows(ours, hosts, job_id) == []

        missing = run_cli("kill", ours, str(hosts), job_id)
        assert missing.returncode == 1 and f"no running job {job_id}" in missing.stderr
        assert job.poll() is None  # their job never noticed

        killed = run_cli("kill", theirs, str(hosts), job_id)
        assert killed.returncode == 0, killed.stderr
        assert_every_agent_stopped(killed.stdout, nodes=2)
        assert job.wait(timeout=30) == 137
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
            job.wait(timeout=30)


def _ps_rows(cluster, hosts: Path, job_id: str) -> list[tuple[str, int]]:
    listed = run_cli("ps", cluster, "--json", str(hosts))
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    return sorted((r["host"], r["node_rank"]) for r in rows if r["job_id"] == job_id)


@pytest.mark.torch
def test_a_job_of_another_simulated_host_on_this_machine_is_not_this_hosts(
    sim_cluster, tmp_path: Path
) -> None:
    """Hosts of one simulated cluster share a machine, each on its own address: node1's
    job of an id made ``run`` of that id on node0 fail its preflight (``a job with this id
    is already running here (node 0, ...)``): a restart dropped healthy hosts for a lost
    host's job. ``ps`` through node0 listed node1's job as node0's."""
    job_id = f"shared-{uuid.uuid4().hex[:8]}"
    theirs = write_hosts(tmp_path / "node1.yaml", [("node1", 1)])
    ours = write_hosts(tmp_path / "node0.yaml", [("node0", 1)])
    job = start_cli("exec", sim_cluster, "--job-id", job_id, str(theirs), "--", "sh", "-c",
                    "echo up; sleep 600")  # fmt: skip
    try:
        wait_for_lines(job, b"up", 1, timeout=60)
        assert _ps_rows(sim_cluster, ours, job_id) == []
        assert _ps_rows(sim_cluster, theirs, job_id) == [("node1", 0)]
        argv = ("--job-id", job_id, str(ours), "flaky.py", "--fail-rank", "9", "--sleep", "0")
        result = run_cli("run", sim_cluster, *argv, timeout=180)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "rank 0 restart -1 world 1 up" in result.stdout
        assert job.poll() is None  # node1's job never noticed
    finally:
        job.send_signal(signal.SIGINT)
        job.wait(timeout=30)
