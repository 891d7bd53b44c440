"""``clusterlaunch ps`` / ``kill`` with two real jobs running on the same hosts."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path

import pytest

from clusterlaunch.remote import records
from clusterlaunch.testing import find_processes
from tests.cluster.support import (
    PYTHON,
    assert_every_agent_stopped,
    run_cli,
    start_cli,
    wait_for_lines,
    write_hosts,
)

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


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_kill_stops_one_job_and_spares_the_other(sim_cluster, tmp_path: Path, client: str) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    use = ("--ssh-client", client)
    # Unique ids: every simulated host is this machine's user, so another suite
    # running this test at the same time would otherwise kill or list our jobs.
    job_a, job_b = (f"job-{which}-{uuid.uuid4().hex[:8]}" for which in "ab")
    first = start_cli(
        "run", sim_cluster, *use, "--job-id", job_a, "--grace", "2", str(hosts), "sleeper.py"
    )
    second = start_cli(
        "run", sim_cluster, *use, "--job-id", job_b, "--grace", "2", str(hosts), "sleeper.py"
    )
    try:
        wait_for_lines(first, b" up", 2, timeout=120)
        wait_for_lines(second, b" up", 2, timeout=120)

        listed = run_cli("ps", sim_cluster, *use, "--json", str(hosts))
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        # Every simulated host is this machine's user: another suite's jobs show up too.
        rows = [r for r in rows if r["job_id"] in (job_a, job_b)]
        assert sorted((r["job_id"], r["host"], r["node_rank"]) for r in rows) == [
            (job_a, "node0", 0),
            (job_a, "node1", 1),
            (job_b, "node0", 0),
            (job_b, "node1", 1),
        ]
        assert all("torch.distributed.run" in r["command"] for r in rows)

        killed = run_cli("kill", sim_cluster, *use, str(hosts), job_a)
        assert killed.returncode == 0, killed.stderr
        assert_every_agent_stopped(killed.stdout, nodes=2)

        # The attached controller of job-a reports it, with its own exit status.
        assert first.wait(timeout=30) == 137
        assert first.stderr is not None
        assert "the job was killed (clusterlaunch kill)" in first.stderr.read().decode()
        assert _job_processes(sim_cluster, job_a) == []

        # job-b never noticed: its controller and all its processes still run.
        assert second.poll() is None
        assert len(_job_processes(sim_cluster, job_b)) >= 6  # 2 x (agent, torchrun, worker)
        table = run_cli("ps", sim_cluster, *use, str(hosts))
        assert job_b in table.stdout and job_a not in table.stdout
        # What identifies the job: its script, not the interpreter and torchrun's options
        # (the column, cut at 80 characters, never reached the script).
        rows = [line.split() for line in table.stdout.splitlines() if line.startswith(job_b)]
        assert [row[-1] for row in rows] == ["sleeper.py", "sleeper.py"], table.stdout

        missing = run_cli("kill", sim_cluster, *use, str(hosts), job_a)
        assert missing.returncode == 1 and f"no running job {job_a}" in missing.stderr
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                process.wait(timeout=30)
    assert second.returncode == 130


def test_ps_and_kill_report_every_host_they_could_not_ask(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    for command, extra in (("ps", []), ("kill", ["some-job"])):
        result = run_cli(command, sim_cluster, "--python", "/nonexistent/py", str(hosts), *extra)
        assert result.returncode == 2, result.stderr
        errors = result.stderr.splitlines()
        for host in ("node0", "node1"):
            assert any(
                line.startswith(f"clusterlaunch: error: {host}: could not ask: /nonexistent/py")
                for line in errors
            ), result.stderr
        assert "no clusterlaunch jobs running" not in result.stdout
        assert "no running job" not in result.stderr


def test_ps_and_kill_report_a_host_they_could_not_reach(sim_cluster, tmp_path: Path) -> None:
    """Unreachable is "could not ask" too, and ps says no more than the others answered."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"port": 1})])
    for command, extra in (("ps", []), ("kill", ["some-job"])):
        result = run_cli(command, sim_cluster, str(hosts), *extra)
        assert result.returncode == 2, result.stderr
        refused = "clusterlaunch: error: node1: could not ask: connection refused by"
        assert any(line.startswith(refused) for line in result.stderr.splitlines()), result.stderr
        assert "no clusterlaunch jobs running on these hosts" not in result.stdout


def test_ps_and_kill_find_a_job_whose_python_and_records_depend_on_setup(
    sim_cluster, tmp_path: Path
) -> None:
    """``python:`` resolves only after ``setup:``, which also exports XDG_RUNTIME_DIR."""
    bin_dir, runtime = tmp_path / "bin", tmp_path / "xdg"
    bin_dir.mkdir()
    runtime.mkdir()
    wrapper = bin_dir / "py-after-setup"
    wrapper.write_text(f'#!/bin/sh\nexec {PYTHON} "$@"\n')
    wrapper.chmod(0o755)
    setup = f"export PATH={bin_dir}:$PATH\nexport XDG_RUNTIME_DIR={runtime}"
    extra = {"python": "py-after-setup", "setup": setup}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, extra), ("node1", 1, extra)])
    job_id = f"late-{uuid.uuid4().hex[:8]}"
    job = start_cli(
        "exec", sim_cluster, "--job-id", job_id, str(hosts), "--", "sh", "-c", "echo up; sleep 600"
    )
    try:
        wait_for_lines(job, b"up", 2, timeout=60)
        listed = run_cli("ps", sim_cluster, "--json", str(hosts))
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        mine = sorted((r["host"], r["node_rank"]) for r in rows if r["job_id"] == job_id)
        assert mine == [("node0", 0), ("node1", 1)]
        assert list(runtime.iterdir()) == []  # records do not follow the setup's environment
        killed = run_cli("kill", sim_cluster, str(hosts), job_id)
        assert killed.returncode == 0, killed.stderr
        assert_every_agent_stopped(killed.stdout, nodes=2)
        assert job.wait(timeout=30) == 137
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
            job.wait(timeout=30)


def test_kill_of_an_id_that_never_ran_leaves_a_dated_mark(sim_cluster, tmp_path: Path) -> None:
    """It may be a job still in its setup: that one finds the mark and does not start
    (tests/cluster/test_job_ids.py). Marks a day old are swept (tests/unit/test_records.py)."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    typo = f"typo-{uuid.uuid4().hex[:8]}"
    result = run_cli("kill", sim_cluster, str(hosts), typo)
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"clusterlaunch: no running job {typo} on these hosts; "
        "a job of that id still starting will not start\n"
    )
    assert time.time() - (records.killed_at(typo) or 0) < 60
    for folder in records.state_dirs():  # this test's own
        Path(folder, typo + ".killed").unlink(missing_ok=True)


# What each kind of job runs, and what its three nodes print once up.
_KINDS = {
    "run": (["sleeper.py"], b" up"),
    "exec": (["--", "sh", "-c", "echo node-up; exec sleep 600"], b"node-up"),
}


@pytest.mark.parametrize("kind", ["run", "exec"])
def test_kill_lists_every_node_those_stopped_before_it_looked_not_found(
    sim_cluster, tmp_path: Path, kind: str
) -> None:
    """Asked through node2 alone, kill stops node 2; its controller then stops nodes 0 and 1
    before any kill could look for them: they are rows too, ``not found``, not left out.
    An ``exec``'s command does not say how many nodes it has: its records do."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    only_node2 = write_hosts(tmp_path / "node2.yaml", [("node2", 1)])
    job_id = f"rows-{uuid.uuid4().hex[:8]}"
    command, up = _KINDS[kind]
    job = start_cli(kind, sim_cluster, "--job-id", job_id, "--grace", "2", str(hosts), *command)
    try:
        wait_for_lines(job, up, 3, timeout=120)
        killed = run_cli("kill", sim_cluster, str(only_node2), job_id)
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.splitlines()[1:] == [
            "host   node  state      after",
            "-      0     not found  -",
            "-      1     not found  -",
            f"node2  2     stopped    {killed.stdout.split()[-2]} s",
        ], killed.stdout
        assert_every_agent_stopped(killed.stdout, nodes=3)
        assert job.wait(timeout=30) == 137
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGINT)
            job.wait(timeout=30)
