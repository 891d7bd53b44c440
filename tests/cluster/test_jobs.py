"""``clusterlaunch ps`` / ``kill`` with two real jobs running on the same hosts."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from clusterlaunch.testing import find_processes
from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]


def _job_processes(cluster, job_id: str) -> list[int]:
    """PIDs on the simulated hosts whose environment carries ``job_id``."""
    needle = f"CLUSTERLAUNCH_JOB_ID={job_id}\0".encode()
    found = []
    for proc in find_processes(cluster.markers()):
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ:
            found.append(proc.pid)
    return found


def test_kill_stops_one_job_and_spares_the_other(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    first = start_cli(
        "run", sim_cluster, "--job-id", "job-a", "--grace", "2", str(hosts), "sleeper.py"
    )
    second = start_cli(
        "run", sim_cluster, "--job-id", "job-b", "--grace", "2", str(hosts), "sleeper.py"
    )
    try:
        wait_for_lines(first, b" up", 2, timeout=120)
        wait_for_lines(second, b" up", 2, timeout=120)

        listed = run_cli("ps", sim_cluster, "--json", str(hosts))
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted((r["job_id"], r["host"], r["node_rank"]) for r in rows) == [
            ("job-a", "node0", 0),
            ("job-a", "node1", 1),
            ("job-b", "node0", 0),
            ("job-b", "node1", 1),
        ]
        assert all("torch.distributed.run" in r["command"] for r in rows)

        killed = run_cli("kill", sim_cluster, str(hosts), "job-a")
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.count("stopped") == 2

        # The attached controller of job-a reports it, with its own exit status.
        assert first.wait(timeout=30) == 137
        assert first.stderr is not None
        assert "the job was killed (clusterlaunch kill)" in first.stderr.read().decode()
        assert _job_processes(sim_cluster, "job-a") == []

        # job-b never noticed: its controller and all its processes still run.
        assert second.poll() is None
        assert len(_job_processes(sim_cluster, "job-b")) >= 6  # 2 x (agent, torchrun, worker)
        table = run_cli("ps", sim_cluster, str(hosts))
        assert "job-b" in table.stdout and "job-a" not in table.stdout

        missing = run_cli("kill", sim_cluster, str(hosts), "job-a")
        assert missing.returncode == 1 and "no running job job-a" in missing.stderr
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=30)
    assert second.returncode == 130
