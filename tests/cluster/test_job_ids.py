"""A job id is one job's, per user and host, whatever the timing; a kill reaches one still starting.

Real sshd hosts (``sim_cluster``). Every agent claims its job's id on its host as it
starts (``remote/claims.py``); its per-rank files live in the user's private state dir;
``kill`` leaves a dated mark that a job still in its setup or preflight finds at its go.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.remote import records
from tests.cluster.support import run_cli, start_cli, stderr_until, write_hosts

pytestmark = [pytest.mark.cluster]
IN_USE = "a job with this id is already running here"


def _ended(process: subprocess.Popen[bytes], timeout: float = 90) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out.decode(), err.decode()


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def _job_id(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"  # other suites share this machine's user


@pytest.fixture
def forget_kills() -> Iterator[list[str]]:
    """The ids a test killed: their dated marks go with the test (a day, else)."""
    killed: list[str] = []
    yield killed
    for folder, job_id in itertools.product(records.state_dirs(), killed):
        Path(folder, job_id + ".killed").unlink(missing_ok=True)


def test_execs_started_together_run_one_job_of_an_id(sim_cluster, tmp_path: Path) -> None:
    """Asked first, ps's way, two of five ran, and ps listed the id twice on each host.

    Claimed by the agents, one job of the id holds each host: the others are refused in
    one line, exit 2. (One that won a host before losing another ran there until its
    controller stopped it: nothing holds every host at once.)"""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    job_id = _job_id("together")
    command = ("--", "sh", "-c", "echo ran; sleep 12")
    execs = [start_cli("exec", sim_cluster, "--job-id", job_id, str(hosts), *command)]
    execs += [start_cli("exec", sim_cluster, "--job-id", job_id, str(hosts), *command)]
    execs += [start_cli("exec", sim_cluster, "--job-id", job_id, str(hosts), *command)]
    try:
        time.sleep(7)  # the others refused (a claim's holder has 2 s to let go), one runs
        listed = run_cli("ps", sim_cluster, "--json", str(hosts))
        ended = [_ended(process) for process in execs]
    finally:
        _stop(execs)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert sorted(r["node_rank"] for r in rows if r["job_id"] == job_id) == [0, 1], rows
    codes = sorted(code for code, _, _ in ended)
    assert codes == [0, ExitStatus.USAGE, ExitStatus.USAGE], ended
    for code, _, err in ended:
        if code == ExitStatus.USAGE:
            assert IN_USE in err and err.count("\n") == 1, err  # one line


def test_an_exec_whose_slow_setup_let_another_start_is_refused(sim_cluster, tmp_path: Path) -> None:
    """A's own check passed before its setup, B's during it: both ran, exit 0."""
    setup = {"setup": "sleep 6"}
    slow = write_hosts(tmp_path / "slow.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    fast = write_hosts(tmp_path / "fast.yaml", [("node0", 1), ("node1", 1)])
    job_id = _job_id("slow-setup")
    first = start_cli("exec", sim_cluster, "--job-id", job_id, str(slow), "--", "echo", "A")
    try:
        time.sleep(8)  # A checked (ps's way, after its setup) and is in its setup again
        second = run_cli("exec", sim_cluster, "--job-id", job_id, str(fast), "--", "sleep", "8")
        code, out, err = _ended(first)
    finally:
        _stop([first])
    assert second.returncode == 0, second.stderr
    assert code == ExitStatus.USAGE, err
    assert IN_USE in err and "[node0] A" not in out and "[node1] A" not in out


@pytest.mark.torch
def test_folders_another_user_made_in_tmp_under_the_id_block_nothing(
    sim_cluster, tmp_path: Path
) -> None:
    """Each node's files were in /tmp/clusterlaunch-ID-nK, which anyone may create first:
    the run failed its preflight, "already exists (owner uid 1001)", exit 2."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    job_id = _job_id("planted")
    planted = [Path(f"/tmp/clusterlaunch-{job_id}-n{rank}") for rank in (0, 1)]
    for path in planted:
        path.mkdir()
        os.chown(path, 65534, 65534)  # nobody's
    try:
        result = run_cli("run", sim_cluster, "--job-id", job_id, str(hosts), "show_env.py")
    finally:
        for path in planted:
            path.rmdir()
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ENV=") == 2


def _killed_while_starting(sim_cluster, tmp_path: Path, hosts: Path, job_id: str):
    """``run`` of ``hosts`` killed 6 s in (from a hosts file without setups): kill's result,
    and the run's status, stdout and stderr."""
    plain = write_hosts(tmp_path / "plain.yaml", [("node0", 1), ("node1", 1)])  # kill's
    process = start_cli("run", sim_cluster, "--job-id", job_id, str(hosts), "sleeper.py")
    try:
        time.sleep(6)
        killed = run_cli("kill", sim_cluster, str(plain), job_id)
        code, out, err = _ended(process)
    finally:
        _stop([process])
    return killed, code, out, err


@pytest.mark.torch
def test_a_kill_during_the_setup_keeps_the_run_from_starting(
    sim_cluster, tmp_path: Path, forget_kills: list[str]
) -> None:
    """No host held the id yet: kill said "no running job", and the job started 10 s later."""
    setup = {"setup": "sleep 12"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    job_id = _job_id("in-setup")
    forget_kills.append(job_id)
    killed, code, out, err = _killed_while_starting(sim_cluster, tmp_path, hosts, job_id)
    assert killed.returncode == 1, killed.stderr
    assert killed.stderr == (
        f"clusterlaunch: no running job {job_id} on these hosts; "
        "a job of that id still starting will not start\n"
    )
    assert code == ExitStatus.KILLED, err
    assert "job stopped: the job was killed (clusterlaunch kill)" in err
    assert " up" not in out  # no rank started
    assert time.time() - (records.killed_at(job_id) or 0) < 60  # the dated mark it found


@pytest.mark.torch
def test_a_kill_during_the_preflight_finds_the_job_still_starting(
    sim_cluster, tmp_path: Path, forget_kills: list[str]
) -> None:
    """node0's agent holds the id and waits for its go while node1 is in its setup."""
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": "sleep 12"})]
    )
    job_id = _job_id("in-preflight")
    forget_kills.append(job_id)
    killed, code, out, err = _killed_while_starting(sim_cluster, tmp_path, hosts, job_id)
    assert killed.returncode == 0, killed.stderr
    assert (
        killed.stderr
        == f"clusterlaunch: job {job_id} was still starting on node0: it will not start\n"
    )
    assert code == ExitStatus.KILLED, err
    assert " up" not in out


def test_a_kill_during_the_setup_of_an_exec_keeps_it_from_starting(
    sim_cluster, tmp_path: Path, forget_kills: list[str]
) -> None:
    """exec has no go: its agents, started right after their setup, find the mark left since
    their session began."""
    setup = {"setup": "sleep 8"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    job_id = _job_id("exec-setup")
    forget_kills.append(job_id)
    plain = write_hosts(tmp_path / "plain.yaml", [("node0", 1), ("node1", 1)])  # kill's
    process = start_cli("exec", sim_cluster, "--job-id", job_id, str(hosts), "--", "echo", "ran")
    try:
        said = stderr_until(process, "setup still running")  # the agents' own setup
        killed = run_cli("kill", sim_cluster, str(plain), job_id)
        code, out, err = _ended(process)
    finally:
        _stop([process])
    assert killed.returncode == 1, killed.stderr
    assert code == ExitStatus.KILLED, said + err
    assert "job stopped: the job was killed (clusterlaunch kill)" in err
    assert "ran" not in out
