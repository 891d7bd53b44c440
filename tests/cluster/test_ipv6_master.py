"""A master named by a name that resolves to IPv6 alone, on hosts with IPv6 only (root).

Each host is a network namespace with an IPv6 address and no IPv4 one but loopback
(tests/netns.py, ``ipv6=True``); every host's /etc/hosts maps the hosts' names to
those addresses alone. torchrun itself takes ``--master-addr node0`` there (its store
listens on ``[::]`` dual-stack, its clients dial what the name resolves to); node 0's
preflight listener was bound by the master address's form, on 0.0.0.0 for any name,
and every node failed with "Connection refused" before anything started.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.support import LINE, run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.netns, pytest.mark.torch]
HOSTS3 = [("node0", 1), ("node1", 1), ("node2", 1)]


def test_a_master_named_by_an_ipv6_only_name_runs_the_job(
    netns_cluster_factory, tmp_path: Path
) -> None:
    cluster = netns_cluster_factory(3, ipv6=True)
    assert all(":" in host.addr for host in cluster.hosts)
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    checked = run_cli("check", cluster, "--master-addr", "node0", str(hosts))
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    result = run_cli("run", cluster, "--master-addr", "node0", str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ranks = sorted(
        (int(found[1]), found[2])
        for line in result.stdout.splitlines()
        if (found := LINE.match(line))
    )
    assert ranks == [(0, "node0"), (1, "node1"), (2, "node2")], result.stdout[-2000:]
    assert result.stdout.count("SUM=6 ") == 3, result.stdout[-2000:]
    assert re.search(r"master node0:\d+", result.stderr), result.stderr[-2000:]


def test_an_ipv6_master_is_bracketed_with_its_port(netns_cluster_factory, tmp_path: Path) -> None:
    """``master fd42:X::a:41319`` read as one address; ssh's own words bracket it."""
    cluster = netns_cluster_factory(2, ipv6=True)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    node0 = cluster.host("node0").addr
    result = run_cli("run", cluster, "--master-port", "29533", str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"master [{node0}]:29533" in result.stderr, result.stderr[-2000:]
