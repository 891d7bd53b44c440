"""A host on a port other than 22 known by a port-less known_hosts line, for both SSH clients.

ssh looks such a host up as ``[host]:port`` and, finding no key of the type, checks the
plain ``host`` lines too ("checking without port identifier", sshconnect.c): the key there
is accepted and nothing is written; another key there leaves the host unknown (not
changed). The paramiko client refused the host under StrictHostKeyChecking yes and, under
accept-new, wrote a ``[host]:port`` line that ssh does not. Real sshd, real ssh (OpenSSH
9.2) with the same config as the ground truth.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import paramiko
import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import exec_echo_hi, recorded_key, write_hosts

pytestmark = [pytest.mark.cluster]

CLIENTS = ["paramiko", "openssh"]


def _config(cluster: LoopbackCluster, tmp_path: Path, known: str, checking: str) -> Path:
    """The cluster's config with StrictHostKeyChecking ``checking`` and a user known_hosts
    holding ``known`` (lines, ``{K0}``/``{K1}`` standing for node0's and node1's keys)."""
    keys = {"K0": recorded_key(cluster, "node0"), "K1": recorded_key(cluster, "node1")}
    (tmp_path / "known_hosts").write_text(known.format(**keys))
    text = cluster.ssh_config.read_text()
    text = re.sub(
        r"(?m)^\s*UserKnownHostsFile .*$", f"    UserKnownHostsFile {tmp_path}/known_hosts", text
    )
    text = re.sub(
        r"(?m)^\s*StrictHostKeyChecking .*$", f"    StrictHostKeyChecking {checking}", text
    )
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return config


def _by_ssh(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-v", "-F", str(config), "node0", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _reset(tmp_path: Path, text: str) -> None:
    """known_hosts back to ``text`` (what ssh, the ground truth, may have added is dropped)."""
    (tmp_path / "known_hosts").write_text(text)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("checking", ["yes", "accept-new"])
@pytest.mark.parametrize("hashed", [False, True], ids=["plain", "hashed"])
def test_the_key_on_a_port_less_line_is_accepted_and_nothing_written(
    sim_cluster_factory, tmp_path: Path, client: str, checking: str, hashed: bool
) -> None:
    cluster = sim_cluster_factory(2)
    node0 = cluster.host("node0")
    assert node0.port != 22  # the lookup ssh makes off port 22 is the point
    name = paramiko.HostKeys.hash_host(node0.addr) if hashed else node0.addr
    config = _config(cluster, tmp_path, f"{name} {{K0}}\n", checking)
    before = (tmp_path / "known_hosts").read_text()
    by_ssh = _by_ssh(config)
    assert by_ssh.returncode == 0, by_ssh.stderr  # ssh itself: the ground truth
    assert "found matching key w/out port" in by_ssh.stderr
    assert (tmp_path / "known_hosts").read_text() == before  # ssh recorded nothing
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert (tmp_path / "known_hosts").read_text() == before


@pytest.mark.parametrize("client", CLIENTS)
def test_another_key_on_a_port_less_line_leaves_the_host_unknown(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """node1's key on node0's port-less line: unknown, not changed (ssh: "No ED25519 host
    key is known for [addr]:port and you have requested strict checking")."""
    cluster = sim_cluster_factory(2)
    node0 = cluster.host("node0")
    config = _config(cluster, tmp_path, f"{node0.addr} {{K1}}\n", "yes")
    before = (tmp_path / "known_hosts").read_text()
    by_ssh = _by_ssh(config)
    assert by_ssh.returncode == 255 and "No ED25519 host key is known" in by_ssh.stderr
    assert "HOST IDENTIFICATION HAS CHANGED" not in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == "" and "HOST KEY CHANGED" not in result.stderr
    if client == "paramiko":
        assert "unknown host key (StrictHostKeyChecking yes" in result.stderr
    assert (tmp_path / "known_hosts").read_text() == before


@pytest.mark.parametrize("client", CLIENTS)
def test_another_key_on_a_port_less_line_is_recorded_under_accept_new(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """Under accept-new ssh connects and records ``[addr]:port``, as for a host it never saw."""
    cluster = sim_cluster_factory(2)
    node0 = cluster.host("node0")
    config = _config(cluster, tmp_path, f"{node0.addr} {{K1}}\n", "accept-new")
    before = (tmp_path / "known_hosts").read_text()
    by_ssh = _by_ssh(config)
    assert by_ssh.returncode == 0, by_ssh.stderr
    added = f"[{node0.addr}]:{node0.port} {recorded_key(cluster, 'node0')}\n"
    assert (tmp_path / "known_hosts").read_text() == before + added
    _reset(tmp_path, before)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert (tmp_path / "known_hosts").read_text() == before + added


@pytest.mark.parametrize("client", CLIENTS)
def test_a_port_less_revoked_line_is_not_bypassed(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """ssh refuses a key a port-less ``@revoked`` line holds, even with a plain line for it;
    the paramiko client, unable to check revoked keys, refuses the host by name."""
    cluster = sim_cluster_factory(2)
    node0 = cluster.host("node0")
    known = f"@revoked {node0.addr} {{K0}}\n{node0.addr} {{K0}}\n"
    config = _config(cluster, tmp_path, known, "yes")
    by_ssh = _by_ssh(config)
    assert by_ssh.returncode == 255 and "REVOKED HOST KEY DETECTED" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == ""
    if client == "paramiko":
        assert "@revoked" in result.stderr and "use --ssh-client openssh" in result.stderr
