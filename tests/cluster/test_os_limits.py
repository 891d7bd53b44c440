"""Limits of the controller's machine: a process that may start no more threads (a pids
cgroup's ``pids.max``, as ``ulimit -u`` for a user). One line naming the limit and its fix,
exit 2 before anything starts, the documented status during a job; never a traceback."""

from __future__ import annotations

import pytest

from tests import cgroups
from tests.cluster.support import run_cli, write_hosts

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(cgroups.why_not() is not None, reason=str(cgroups.why_not())),
]

FIX = "raise it, or use fewer hosts or a lower --fanout"


def _one_line(result, limit: int) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("clusterlaunch: error: cannot start a thread: the limit ")
    assert f"pids.max {limit} (cgroup /sys/fs/cgroup/" in lines[0]
    assert lines[0].endswith(f" was reached; {FIX}")
    return lines[0]


# 2: the fan-out's first thread; 5: a connection's own (paramiko's reader, the keepalives).
@pytest.mark.parametrize("limit", [2, 5])
@pytest.mark.parametrize(
    "command, words",
    [("run", ["sleeper.py"]), ("exec", ["--", "true"]), ("check", []), ("ps", [])],
)
def test_no_thread_to_start_is_one_line_exit_2_and_nothing_runs(
    sim_cluster, tmp_path, command, words, limit
):
    hosts = write_hosts(tmp_path / "hosts.yaml", [(f"node{i}", 1) for i in range(4)])
    with cgroups.pids_limit(limit) as prefix:
        result = run_cli(command, sim_cluster, str(hosts), *words, prefix=prefix)
    assert result.returncode == 2, result.stderr
    _one_line(result, limit)  # and nothing left on the hosts: sim_cluster checks


def test_openssh_client_that_cannot_fork_ssh_names_the_limit(sim_cluster, tmp_path):
    hosts = write_hosts(tmp_path / "hosts.yaml", [(f"node{i}", 1) for i in range(4)])
    with cgroups.pids_limit(2) as prefix:
        result = run_cli(
            "exec", sim_cluster, "--ssh-client", "openssh", str(hosts), "true", prefix=prefix
        )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert (
        "cannot run ssh: [Errno 11] Resource temporarily unavailable: the limit pids.max 2 ("
        in (result.stderr)
    )
    assert FIX in result.stderr


@pytest.mark.torch
def test_stacks_that_cannot_start_a_thread_still_stop_a_stalled_job_125(
    sim_cluster_factory, tmp_path, assert_no_orphans
):
    """One host: the job holds 4 threads (main, paramiko's reader, keepalives,
    heartbeats), the stacks' thread is the 5th and its fan-out's the 6th. It was the
    teardown, "the job ended before the stacks were taken: given up", a traceback, exit 1."""
    cluster = sim_cluster_factory(1)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    options = ("--stall-timeout", "3", "--stall-action", "kill", "--grace", "3")
    with cgroups.pids_limit(5) as prefix:
        result = run_cli("run", cluster, *options, str(hosts), "sleeper.py", prefix=prefix)
    assert result.returncode == 125, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    said = "clusterlaunch: the stacks could not be taken: cannot start a thread: the limit "
    assert said + "pids.max 5 (" in result.stderr
    assert "given up" not in result.stderr
    assert "job stopped: no rank printed for 3 s (--stall-timeout" in result.stderr
    assert_no_orphans(cluster)
