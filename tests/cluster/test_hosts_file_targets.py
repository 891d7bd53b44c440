"""Hosts files against real sshd hosts: what a job's hosts are, as ssh reaches them.

``exec`` has no master, so a ``localhost`` node 0 is fine there; two entries that
reach the same sshd (the SSH config's port) are one host listed twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


def test_exec_runs_with_localhost_as_node0_of_several_hosts(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("localhost", 1), ("node0", 1)])
    ours = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "hi")
    assert ours.returncode == 0, ours.stderr
    assert sorted(line.split() for line in ours.stdout.splitlines()) == [
        ["[localhost]", "hi"],
        ["[node0]", "hi"],
    ]
    refused = run_cli("check", sim_cluster, str(hosts), "--no-python", "/bin/true")
    assert refused.returncode == 2
    assert "localhost cannot be the master of a multi-host job" in refused.stderr


def test_two_entries_reaching_one_sshd_are_refused_before_anything_starts(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """node0 and node0 with port: its SSH config's Port differ as written, not as reached."""
    node0 = sim_cluster.host("node0")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node0", 1, {"port": node0.port})])
    mark = tmp_path / "ran"
    ours = run_cli("exec", sim_cluster, str(hosts), "--", "touch", str(mark))
    assert ours.returncode == 2 and ours.stdout == "", ours.stderr
    (line,) = ours.stderr.splitlines()
    assert line.startswith(
        f"clusterlaunch: error: {hosts}:6: host: node0 (port: {node0.port}) reaches the same "
        "sshd as node0 at line 4 ("
    ), line
    assert line.endswith(
        f"{node0.addr}:{node0.port} after your SSH config); "
        "list each host once and raise its gpus instead"
    ), line
    assert not mark.exists()
    other = write_hosts(tmp_path / "other.yaml", [("node0", 1), ("node1", 1)])
    assert run_cli("exec", sim_cluster, str(other), "--", "true").returncode == 0
