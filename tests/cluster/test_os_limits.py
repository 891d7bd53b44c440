"""OS limits, never a traceback: one line naming the limit and its fix.

The controller's machine: a process that may start no more threads (a pids
cgroup's ``pids.max``, as ``ulimit -u`` for a user): exit 2 before anything
starts, the documented status during a job. A host's session with too few
files (``setup: ulimit -n 8``) or processes: found by the preflight, and by
``exec`` (no preflight) as it starts the command there: exit 2, not a shell's
127 or 126, not the agent's own traceback."""

from __future__ import annotations

import pytest

from tests import cgroups
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]
needs_cgroups = pytest.mark.skipif(cgroups.why_not() is not None, reason=str(cgroups.why_not()))

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
@needs_cgroups
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


@needs_cgroups
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


@needs_cgroups
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


FEW_FILES = (
    "Too many open files: this host's session may open 8 files (ulimit -n), too few to start "
    "the job; raise it: ulimit -n in setup:, or nofile in the host's limits.conf"
)
NO_PROCESS = "Resource temporarily unavailable: this host's session may start no more processes ("


def _limited_host(tmp_path, setup: str):
    """node0 and node1; node1's session limited by ``setup``."""
    return write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": setup})])


def _host_row(result, host: str) -> str:
    rows = [line for line in result.stdout.splitlines() if line.split()[1:2] == [host]]
    assert len(rows) == 1, result.stdout
    return rows[0]


def test_check_finds_a_host_with_too_few_open_files(sim_cluster, tmp_path):
    """It passed: the probe needed fewer than the agent's start, which then failed."""
    result = run_cli("check", sim_cluster, str(_limited_host(tmp_path, "ulimit -n 8")))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert _host_row(result, "node1").endswith(FEW_FILES)
    assert _host_row(result, "node0").endswith(" ok")
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_exec_on_a_host_with_too_few_open_files_is_2_in_one_line(sim_cluster, tmp_path, client):
    """It was the agent's own traceback (listing /proc for leftovers) and 127, "not found"."""
    hosts = _limited_host(tmp_path, "ulimit -n 8")
    result = run_cli("exec", sim_cluster, "--ssh-client", client, str(hosts), "--", "echo", "hi")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert f"clusterlaunch: node1: cannot start echo: [Errno 24] {FEW_FILES}\n" in result.stderr
    assert "job failed: 1 of 2 host(s) failed: node1 (2)" in result.stderr
    assert result.stdout == "[node0] hi\n"


@pytest.mark.torch
def test_run_refuses_a_host_with_too_few_open_files_before_anything_starts(sim_cluster, tmp_path):
    hosts = _limited_host(tmp_path, "ulimit -n 8")
    result = run_cli("run", sim_cluster, str(hosts), "sleeper.py")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("clusterlaunch: preflight failed on 1 host(s); nothing")
    assert "node1  3." in result.stderr and result.stderr.rstrip().endswith(FEW_FILES)
    assert "Traceback" not in result.stdout + result.stderr


@needs_cgroups
def test_a_host_session_that_may_start_no_process_is_found_and_named(sim_cluster, tmp_path):
    """The session joins a cgroup with pids.max 1 (``ulimit -u`` spent, for a user): its
    Python is the one process. check passed; exec said [Errno 11], 127."""
    with cgroups.pids_group(1) as group:
        hosts = _limited_host(tmp_path, f"echo $$ > {group}/cgroup.procs")
        check = run_cli("check", sim_cluster, str(hosts))
        run = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "hi")
    assert check.returncode == 2, (check.stdout, check.stderr)
    assert NO_PROCESS in _host_row(check, "node1")
    assert run.returncode == 2, run.stderr
    assert f"clusterlaunch: node1: cannot start echo: [Errno 11] {NO_PROCESS}" in run.stderr
    assert "Traceback" not in run.stdout + run.stderr + check.stdout + check.stderr
