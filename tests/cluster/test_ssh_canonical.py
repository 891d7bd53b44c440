"""Host names canonicalized as ssh canonicalizes them, against real sshd, with a DNS
server of the test's own as the resolver (tests/dns.py, a mount namespace).

``n0`` has ``HostName box0``; under ``CanonicalizeHostname yes`` ssh reaches
``box0.cl.test`` with that block's Port, User and key. paramiko's lookup
canonicalized ``n0`` instead and wrote it over HostName: the paramiko client dialled
``n0.cl.test`` (another address) on port 22. ``ssh`` with the same config is the
ground truth.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests import dns
from tests.cluster.support import exec_echo_hi, recorded_key, write_hosts

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(dns.why_not() is not None, reason=dns.why_not() or ""),
]
CLIENTS = ["paramiko", "openssh"]


@pytest.fixture
def canonical(sim_cluster_factory, tmp_path: Path) -> Iterator[tuple[LoopbackCluster, list[str]]]:
    """node0 known to DNS as box0.cl.test (and web.cl.test, a CNAME); n0.cl.test is
    another address, where nothing listens."""
    cluster = sim_cluster_factory(1)
    node = cluster.host("node0")
    names = {"box0.cl.test": node.addr, "n0.cl.test": "127.0.0.2"}
    with dns.resolver(tmp_path, names, {"web.cl.test": "box0.cl.test"}) as prefix:
        cluster.known_hosts.write_text(
            f"[box0.cl.test]:{node.port} {recorded_key(cluster, 'node0')}\n"
        )
        yield cluster, prefix


def _config(cluster: LoopbackCluster, tmp_path: Path, extra: str = "") -> Path:
    """The cluster's node0 block as ``Host box0.cl.test`` (no HostName), reached as n0."""
    block = re.sub(r"(?m)^Host node0$", "Host box0.cl.test", cluster.ssh_config.read_text())
    block = re.sub(r"(?m)^\s*HostName .*\n", "", block)
    head = f"CanonicalizeHostname yes\nCanonicalDomains cl.test\n{extra}"
    config = tmp_path / "ssh_config"
    config.write_text(f"{head}Host n0\n    HostName box0\n{block}")
    return config


def _ssh(prefix: list[str], config: Path, alias: str) -> subprocess.CompletedProcess[str]:
    argv = [*prefix, "ssh", "-F", str(config), alias, "echo", "hi"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("client", CLIENTS)
def test_hostname_is_canonicalized_as_ssh_does(canonical, tmp_path: Path, client: str) -> None:
    cluster, prefix = canonical
    config = _config(cluster, tmp_path)
    by_ssh = _ssh(prefix, config, "n0")
    assert by_ssh.returncode == 0 and by_ssh.stdout == "hi\n", by_ssh.stderr  # the ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("n0", 1)])
    result = exec_echo_hi(client, hosts, config=config, prefix=prefix)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[n0] hi\n"


@pytest.mark.parametrize("client", CLIENTS)
def test_dns_aliases_are_followed_by_ssh_or_refused(canonical, tmp_path: Path, client: str) -> None:
    """CanonicalizePermittedCNAMEs: ``web`` is a DNS alias of box0.cl.test, which ssh
    follows; the OpenSSH client does as ssh, the paramiko client refuses in one line."""
    cluster, prefix = canonical
    rules = "CanonicalizePermittedCNAMEs *.cl.test:*.cl.test\n"
    config = _config(cluster, tmp_path, rules)
    by_ssh = _ssh(prefix, config, "web")
    assert by_ssh.returncode == 0 and by_ssh.stdout == "hi\n", by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("web", 1)])
    result = exec_echo_hi(client, hosts, config=config, prefix=prefix)
    if client == "openssh":
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout == "[web] hi\n"
    else:
        assert result.returncode == 2 and result.stdout == ""
        said = f"{config}:3: CanonicalizePermittedCNAMEs: paramiko cannot evaluate it as ssh does"
        assert said in result.stderr, result.stderr
        assert "use --ssh-client openssh" in result.stderr
