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

from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

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
        assert killed.returncode == 0 and killed.stdout.count("stopped") == 2, killed.stderr
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
