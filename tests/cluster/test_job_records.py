"""Job records and claims as a host's user may leave them: a second state folder appearing
while a job runs, a stray or damaged ``.json`` next to the records.

node0's sshd runs in a mount namespace of its own with a private tmpfs over
/tmp/clusterlaunch-UID (and an empty one over /run/user, which the test fills when it
wants /run/user/UID to appear), so what the test leaves there touches nobody else's jobs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.testing import LoopbackCluster, SimHost
from tests import mountns
from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]
RECORDS = f"/tmp/clusterlaunch-{os.getuid()}"


class PrivateRecordsCluster(LoopbackCluster):
    """Every host's sshd (and its sessions) sees a /tmp/clusterlaunch-UID and a /run/user
    of its own, both empty."""

    def _launch_prefix(self, host: SimHost) -> list[str]:
        script = (
            f"mkdir -p -m 0700 {RECORDS} && mount -t tmpfs -o mode=0700 tmpfs {RECORDS} && "
            'mount -t tmpfs -o mode=0755 tmpfs /run/user && exec "$@"'
        )
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


@pytest.fixture
def cluster(sim_cluster_factory) -> LoopbackCluster:
    if (why := mountns.why_not()) is not None or not os.path.isdir("/run/user"):
        pytest.skip(why or "no /run/user to mount over")
    return sim_cluster_factory(1, cls=PrivateRecordsCluster)


def _seen_by(cluster: LoopbackCluster, path: str) -> Path:
    """``path`` as node0's sshd and its sessions see it."""
    return Path(f"/proc/{cluster.host('node0').pid}/root{path}")


def _started(cluster: LoopbackCluster, hosts: Path, job_id: str) -> subprocess.Popen[bytes]:
    job = start_cli("run", cluster, "--job-id", job_id, "--grace", "2", str(hosts), "sleeper.py")
    wait_for_lines(job, b" up", 1, timeout=120)
    return job


def _stop(job: subprocess.Popen[bytes]) -> None:
    if job.poll() is None:
        job.send_signal(signal.SIGINT)
        job.wait(timeout=30)


def test_a_state_folder_that_appears_while_a_job_runs_does_not_let_its_id_run_twice(
    cluster, tmp_path: Path
) -> None:
    """/run/user/UID appeared (a login with pam_systemd, linger) while a job ran: a second
    ``run`` of its id claimed it there, started, and first removed the running job's
    rank-file folder (``ps`` listed the id twice, ``kill`` ended both)."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    job_id = f"dup-{uuid.uuid4().hex[:8]}"
    first = _started(cluster, hosts, job_id)
    try:
        [rank_files] = [p for p in _seen_by(cluster, RECORDS).iterdir() if p.is_dir()]
        _seen_by(cluster, f"/run/user/{os.getuid()}").mkdir(mode=0o700)
        second = run_cli("run", cluster, "--job-id", job_id, str(hosts), "sleeper.py")
        assert second.returncode == ExitStatus.USAGE, second.stdout + second.stderr
        assert "a job with this id is already running here (node 0" in second.stderr
        assert first.poll() is None and rank_files.is_dir()
        listed = run_cli("ps", cluster, str(hosts))
        assert listed.stdout.count(job_id) == 1, listed.stdout
    finally:
        _stop(first)


def test_a_stray_or_damaged_record_neither_breaks_ps_and_kill_nor_hides_the_job(
    cluster, tmp_path: Path
) -> None:
    """A ``junk.json`` gave ``ps`` a traceback (KeyError: 'job_id'), and ``kill`` failed
    there; a running job's record cut short made ``ps`` say "no jobs" and ``kill`` "still
    starting: it will not start", though it stopped the running job."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    job_id = f"rec-{uuid.uuid4().hex[:8]}"
    job = _started(cluster, hosts, job_id)
    try:
        folder = _seen_by(cluster, RECORDS)
        (folder / "junk.json").write_text('{"note": "not a record"}')
        [record] = folder.glob(f"{job_id}.n0.*.json")
        record.write_bytes(record.read_bytes()[:40])  # head -c 40
        listed = run_cli("ps", cluster, str(hosts))
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr
        [row] = [line for line in listed.stdout.splitlines() if line.startswith(job_id)]
        assert row.endswith(f"(unknown: unreadable record {RECORDS}/{record.name})"), row
        killed = run_cli("kill", cluster, str(hosts), job_id)
        assert killed.returncode == 0 and killed.stderr == "", killed.stderr
        assert killed.stdout.splitlines()[2].split()[:3] == ["node0", "0", "stopped"]
        assert job.wait(timeout=30) == ExitStatus.KILLED
        assert (folder / "junk.json").exists() and not record.exists()
    finally:
        _stop(job)
