"""Which key logs in: ssh's order and choice, for both SSH clients, against real sshd.

ssh offers the agent's keys first (a configured IdentityFile's key through the
agent where the agent holds it; with IdentitiesOnly, only those), then the
configured files the agent does not hold. paramiko's client tried the files first
and asked no agent under IdentitiesOnly. ``ssh`` with the same config is the
ground truth; sshd's log (LogLevel VERBOSE) names the key that logged in.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


def _key(path: Path, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True
    )
    return path


def _fingerprint(key: Path) -> str:
    shown = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True)
    return shown.stdout.split()[1]


def _config(cluster: SshVariantCluster, tmp_path: Path, files: list[Path], only: bool) -> Path:
    text = re.sub(r"(?m)^\s*(IdentityFile|IdentitiesOnly) .*\n", "", cluster.ssh_config.read_text())
    lines = "".join(f"    IdentityFile {path}\n" for path in files)
    lines += f"    IdentitiesOnly {'yes' if only else 'no'}\n"
    config = tmp_path / "ssh_config"
    config.write_text(text.replace("    UserKnownHostsFile", lines + "    UserKnownHostsFile", 1))
    return config


def _logged_in_with(cluster: SshVariantCluster, since: int) -> list[str]:
    log = (cluster.host("node0").host_dir / "sshd.log").read_text(errors="replace")[since:]
    return re.findall(r"Accepted publickey for \S+ from \S+ port \d+ ssh2: \S+ (\S+)", log)


def _log_size(cluster: SshVariantCluster) -> int:
    return len((cluster.host("node0").host_dir / "sshd.log").read_text(errors="replace"))


def _exec(config: Path, tmp_path: Path, client: str) -> subprocess.CompletedProcess[str]:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    return exec_echo_hi(client, hosts, config=config)


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_the_agents_key_logs_in_before_a_files(
    sim_cluster_factory, tmp_path: Path, ssh_agent_sock: Path, client: str
) -> None:
    """Both keys are authorized; ssh logs in with the agent's (the paramiko client
    logged in with the file's)."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, count_connections=True)
    in_agent = _key(tmp_path / "in_agent")
    with cluster.authorized_keys.open("a") as authorized:
        authorized.write(Path(f"{in_agent}.pub").read_text())
    subprocess.run(["ssh-add", "-q", str(in_agent)], check=True, capture_output=True)
    config = _config(cluster, tmp_path, [cluster.client_key], only=False)
    start = _log_size(cluster)
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "true"], capture_output=True)
    assert by_ssh.returncode == 0, by_ssh.stderr
    assert _logged_in_with(cluster, start) == [_fingerprint(in_agent)]  # the ground truth
    start = _log_size(cluster)
    result = _exec(config, tmp_path, client)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"
    assert set(_logged_in_with(cluster, start)) == {_fingerprint(in_agent)}


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_identities_only_uses_the_agent_for_a_configured_key(
    sim_cluster_factory, tmp_path: Path, ssh_agent_sock: Path, client: str
) -> None:
    """IdentitiesOnly yes, the IdentityFile passphrase-protected, its key in the agent:
    ssh signs with the agent and asks no passphrase (the paramiko client asked no
    agent and failed). Another key in the agent, authorized but not configured, is not
    offered, by either."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, count_connections=True)
    locked = tmp_path / "locked"
    shutil.copy(cluster.client_key, locked)
    shutil.copy(f"{cluster.client_key}.pub", f"{locked}.pub")
    subprocess.run(["ssh-keygen", "-q", "-p", "-N", "secret", "-f", str(locked)], check=True)
    other = _key(tmp_path / "other")
    with cluster.authorized_keys.open("a") as authorized:
        authorized.write(Path(f"{other}.pub").read_text())
    subprocess.run(["ssh-add", "-q", str(other)], check=True, capture_output=True)
    config = _config(cluster, tmp_path, [locked], only=True)
    ssh = ["ssh", "-F", str(config), "node0", "true"]
    assert subprocess.run(ssh, capture_output=True, env=os.environ).returncode == 255
    assert _exec(config, tmp_path, client).returncode != 0  # only the other key could log in
    subprocess.run(["ssh-add", "-q", str(cluster.client_key)], check=True, capture_output=True)
    start = _log_size(cluster)
    by_ssh = subprocess.run(ssh, capture_output=True)
    assert by_ssh.returncode == 0, by_ssh.stderr
    assert _logged_in_with(cluster, start) == [_fingerprint(cluster.client_key)]
    start = _log_size(cluster)
    result = _exec(config, tmp_path, client)
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(_logged_in_with(cluster, start)) == {_fingerprint(cluster.client_key)}


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_an_identity_file_present_only_as_its_pub_names_the_agents_key(
    sim_cluster_factory, tmp_path: Path, ssh_agent_sock: Path, client: str
) -> None:
    """IdentitiesOnly yes, ``IdentityFile k`` with only ``k.pub`` on disk (the private key
    in the agent alone, as a hardware-backed or 1Password setup keeps it): ssh signs with
    the agent's key; the paramiko client had dropped the file and offered nothing."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, count_connections=True)
    subprocess.run(["ssh-add", "-q", str(cluster.client_key)], check=True, capture_output=True)
    public = tmp_path / "only_pub"
    shutil.copy(f"{cluster.client_key}.pub", f"{public}.pub")
    config = _config(cluster, tmp_path, [public], only=True)
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "true"], capture_output=True)
    assert by_ssh.returncode == 0, by_ssh.stderr  # the ground truth
    start = _log_size(cluster)
    result = _exec(config, tmp_path, client)
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(_logged_in_with(cluster, start)) == {_fingerprint(cluster.client_key)}
