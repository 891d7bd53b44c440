"""``clusterlaunch doctor`` findings that need hosts with their own names and addresses (root).

Each host is a network namespace on a private bridge, with its own hostname
and /etc/hosts (tests/netns.py), so what a host's name resolves to, and which
ports get through between two hosts, are that host's own, as on real machines.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts
from tests.netns import NETNS_ETC

pytestmark = [pytest.mark.cluster, pytest.mark.netns]
HOSTS3 = [("node0", 1), ("node1", 1), ("node2", 1)]


def test_a_host_whose_name_resolves_to_loopback_is_one_finding(netns_cluster_factory, tmp_path):
    cluster = netns_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    assert run_cli("doctor", cluster, str(hosts)).returncode == 0  # as started: healthy
    # What Debian's installer writes: the host's own name on 127.0.1.1. The file is
    # bind-mounted over node1's /etc/hosts; rewriting it in place changes it there.
    own = NETNS_ETC / cluster.namespace("node1") / "hosts"
    others = [line for line in own.read_text().splitlines() if not line.endswith(" node1")]
    own.write_text("\n".join([*others, "127.0.1.1 node1"]) + "\n")
    result = run_cli("doctor", cluster, "--json", str(hosts))
    assert result.returncode == 1, result.stderr[-2000:]
    findings = json.loads(result.stdout)["findings"]
    assert [(f["level"], f["where"]) for f in findings] == [("error", "node1")]
    assert "'node1' resolves to 127.0.1.1 (loopback)" in findings[0]["text"]
    assert cluster.host("node1").addr in findings[0]["text"]


def _block_ephemeral_ports(namespace: str, peer_addr: str) -> None:
    """A firewall in ``namespace``: TCP to ``peer_addr`` on ephemeral ports is refused."""
    low, high = _run(namespace, "cat", "/proc/sys/net/ipv4/ip_local_port_range").split()
    rule = ["ip", "rule", "add", "to", peer_addr, "ipproto", "tcp", "dport", f"{low}-{high}"]
    _run(namespace, *rule, "prohibit")


def _run(namespace: str, *argv: str) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True, check=True
    )
    return done.stdout


def test_a_pair_blocked_on_ephemeral_ports_is_one_finding_while_the_master_port_works(
    netns_cluster_factory, tmp_path: Path
):
    cluster = netns_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    node1, node2 = cluster.host("node1"), cluster.host("node2")
    _block_ephemeral_ports(cluster.namespace("node1"), node2.addr)
    _block_ephemeral_ports(cluster.namespace("node2"), node1.addr)
    # The master port (below the ephemeral range) gets through: today's preflight passes.
    checked = run_cli("check", cluster, "--master-port", "29517", str(hosts))
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    result = run_cli("doctor", cluster, "--json", str(hosts))
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert [(f["level"], f["where"]) for f in report["findings"]] == [("error", "node1 <-> node2")]
    assert report["matrix"]["node1"] == {"node0": True, "node1": None, "node2": False}
    assert report["matrix"]["node2"] == {"node0": True, "node1": False, "node2": None}
    text = run_cli("doctor", cluster, str(hosts)).stdout
    assert "error: node1 <-> node2: neither can connect to the other" in text
