"""GlobalKnownHostsFile as ssh reads it, for both SSH clients.

ssh looks every host's key up in the config's GlobalKnownHostsFile (by default
/etc/ssh/ssh_known_hosts and ssh_known_hosts2) as well as in UserKnownHostsFile.
The paramiko client read /etc/ssh/ssh_known_hosts whatever the config said: a
host known only from a site-wide file the config names was "unknown" to it
(refused under StrictHostKeyChecking yes), and under accept-new a key that ssh
refuses as changed was recorded in the user's file and used. Real sshd, real
ssh as the ground truth.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import exec_echo_hi, recorded_key, write_hosts

pytestmark = [pytest.mark.cluster]


def _site_wide_config(cluster: LoopbackCluster, tmp_path: Path, key_of: str) -> Path:
    """The cluster's config with an empty user known_hosts and a global file that holds
    ``key_of``'s host key under node0's name."""
    (tmp_path / "user_known_hosts").write_text("")
    node0, key = cluster.host("node0"), recorded_key(cluster, key_of)
    (tmp_path / "site_known_hosts").write_text(f"[{node0.addr}]:{node0.port} {key}\n")
    text = cluster.ssh_config.read_text()
    text = re.sub(
        r"(?m)^\s*UserKnownHostsFile .*$",
        f"    UserKnownHostsFile {tmp_path}/user_known_hosts",
        text,
    )
    text = re.sub(
        r"(?m)^\s*GlobalKnownHostsFile .*$",
        f"    GlobalKnownHostsFile /nowhere/known_hosts {tmp_path}/site_known_hosts",
        text,
    )
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return config


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_host_known_from_the_configured_global_file_is_known(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    config = _site_wide_config(cluster, tmp_path, key_of="node0")
    ssh = ["ssh", "-F", str(config), "node0", "true"]  # StrictHostKeyChecking yes
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0, by_ssh.stderr  # ssh itself: the ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert (tmp_path / "user_known_hosts").read_text() == ""  # known: nothing recorded


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_another_key_in_the_global_file_is_a_changed_key(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """node1's key for node0 in the site-wide file: ssh refuses it as changed even under
    accept-new, and so does clusterlaunch (paramiko had recorded node0's key and used it)."""
    cluster = sim_cluster_factory(2)
    config = _site_wide_config(cluster, tmp_path, key_of="node1")
    ssh = ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=accept-new", "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    policy = ("--host-key-policy", "accept-new")
    result = exec_echo_hi(client, hosts, *policy, config=config)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "HOST KEY CHANGED" in result.stderr and result.stdout == ""
    assert (tmp_path / "user_known_hosts").read_text() == ""
