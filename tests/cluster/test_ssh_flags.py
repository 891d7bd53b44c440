"""Yes/no keywords spelled as ssh allows (``true``, ``False``), against real sshd.

ssh reads ``true`` as ``yes`` (readconf.c's multistate_flag). clusterlaunch compared
with ``"yes"``: under ``StrictHostKeyChecking true`` the paramiko client accepted and
recorded a host key ssh refuses, and under ``IdentitiesOnly true`` it logged in with
an agent key ssh does not offer. A value ssh refuses is refused before any host is
contacted. ``ssh`` with the same config is the ground truth.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]
CLIENTS = ["paramiko", "openssh"]


def _spelled(cluster: SshVariantCluster, tmp_path: Path, keyword: str, value: str) -> Path:
    """The cluster's config with ``keyword`` set to ``value`` for every host."""
    text = re.sub(
        rf"(?m)^(\s*){keyword} .*$", rf"\g<1>{keyword} {value}", cluster.ssh_config.read_text()
    )
    config = tmp_path / f"ssh_config_{keyword}_{value}"
    config.write_text(text)
    return config


def _ssh(config: Path) -> subprocess.CompletedProcess[str]:
    argv = ["ssh", "-F", str(config), "node0", "true"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("client", CLIENTS)
def test_strict_host_key_checking_true_refuses_an_unknown_host(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    cluster.known_hosts.write_text("")
    config = _spelled(cluster, tmp_path, "StrictHostKeyChecking", "True")
    by_ssh = _ssh(config)
    assert by_ssh.returncode == 255 and "Host key verification failed" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 2 and "unknown host key" in result.stderr, result.stderr
    assert cluster.known_hosts.read_text() == ""  # nothing recorded, as by ssh


@pytest.mark.parametrize("client", CLIENTS)
def test_identities_only_true_offers_no_other_agent_key(
    sim_cluster_factory, tmp_path: Path, ssh_agent_sock: Path, client: str
) -> None:
    """The configured key is not authorized; the agent's is. ssh under ``IdentitiesOnly
    true`` offers only the configured key and fails; under ``false`` the agent's logs in."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster)
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    subprocess.run(["ssh-add", "-q", str(cluster.client_key)], check=True, capture_output=True)
    base = cluster.ssh_config.read_text().replace(str(cluster.client_key), str(stranger))
    cluster.ssh_config.write_text(base)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    only = _spelled(cluster, tmp_path, "IdentitiesOnly", "true")
    assert _ssh(only).returncode == 255
    result = exec_echo_hi(client, hosts, config=only)
    assert result.returncode != 0 and "hi" not in result.stdout, result.stdout
    free = _spelled(cluster, tmp_path, "IdentitiesOnly", "FALSE")
    assert _ssh(free).returncode == 0
    result = exec_echo_hi(client, hosts, config=free)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_value_ssh_refuses_stops_before_any_host_is_contacted(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, count_connections=True)
    config = _spelled(cluster, tmp_path, "IdentitiesOnly", "maybe")
    by_ssh = _ssh(config)
    assert by_ssh.returncode == 255 and 'unsupported option "maybe"' in by_ssh.stderr
    line = next(
        number
        for number, text in enumerate(config.read_text().splitlines(), 1)
        if "IdentitiesOnly maybe" in text
    )
    before = cluster.connections_to("node0")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"clusterlaunch: error: {config}:{line}: IdentitiesOnly 'maybe': "
        "ssh refuses this value; use yes or no"
    )
    assert cluster.connections_to("node0") == before


@pytest.mark.parametrize("client", CLIENTS)
def test_a_keyword_ssh_does_not_know_stops_before_any_host_is_contacted(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """``StrictHostKeyCheckng yes`` (a typo): ssh refuses the config; the paramiko client
    read past it and trusted a new host key. Now both clients refuse, in ssh's words."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, count_connections=True)
    config = _spelled(cluster, tmp_path, "StrictHostKeyChecking", "yes")
    config.write_text(config.read_text().replace("StrictHostKeyChecking", "StrictHostKeyCheckng"))
    cluster.known_hosts.write_text("")
    assert "Bad configuration option: stricthostkeycheckng" in _ssh(config).stderr
    before = cluster.connections_to("node0")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 2 and result.stdout == ""
    assert "StrictHostKeyCheckng: ssh refuses this config" in result.stderr, result.stderr
    assert cluster.connections_to("node0") == before
    assert cluster.known_hosts.read_text() == ""
