"""PubkeyAcceptedAlgorithms as ssh follows it, for both SSH clients, against real sshd.

ssh offers only keys of the types the config accepts, from identity files and from
the agent alike; the paramiko client offered every key it had, so it logged in where
ssh is refused (and with another key where several are authorized). The hosts'
authorized key is Ed25519; ``ssh`` with the same config is the ground truth.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


def _config(cluster: LoopbackCluster, tmp_path: Path, extra: str, agent: bool) -> Path:
    text = cluster.ssh_config.read_text()
    if agent:  # the key only in the agent: no file, and agent keys allowed
        text = re.sub(r"(?m)^\s*IdentityFile .*$", f"    IdentityFile {tmp_path}/no_key", text)
        text = re.sub(r"(?m)^\s*IdentitiesOnly .*$", "    IdentitiesOnly no", text)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n    {extra}\n" + text)
    return config


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
@pytest.mark.parametrize(
    ("accepted", "logs_in"),
    [
        ("PubkeyAcceptedAlgorithms rsa-sha2-512,rsa-sha2-256", False),
        ("PubkeyAcceptedAlgorithms -ssh-ed25519*", False),
        ("PubkeyAcceptedKeyTypes ecdsa-sha2-nistp256", False),  # the name before OpenSSH 8.5
        ("PubkeyAcceptedAlgorithms ssh-ed25519,rsa-sha2-512", True),
    ],
)
@pytest.mark.parametrize("source", ["file", "agent"])
def test_only_accepted_key_types_log_in(
    sim_cluster_factory, tmp_path: Path, request: pytest.FixtureRequest,
    client: str, accepted: str, logs_in: bool, source: str,
) -> None:  # fmt: skip
    cluster = sim_cluster_factory(1)
    if source == "agent":
        request.getfixturevalue("ssh_agent_sock")
        added = subprocess.run(["ssh-add", str(cluster.client_key)], capture_output=True)
        assert added.returncode == 0, added.stderr
    config = _config(cluster, tmp_path, accepted, agent=source == "agent")
    ssh = ["ssh", "-F", str(config), "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60, env=os.environ)
    assert (by_ssh.returncode == 0) == logs_in, by_ssh.stderr  # the ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    if logs_in:
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout == "[node0] hi\n"
    else:
        assert result.returncode != 0 and result.stdout == ""
        assert re.search(r"authentication failed|Permission denied", result.stderr), result.stderr


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_an_identity_file_that_is_not_there_is_skipped(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """ssh goes on to the next IdentityFile; the paramiko client failed the host with
    "No such file or directory" (a config written for another machine's keys)."""
    cluster = sim_cluster_factory(1)
    missing = f"    IdentityFile {tmp_path}/not_here\n"
    text = re.sub(
        r"(?m)^(\s*IdentityFile .*)$", lambda m: missing + m[1], cluster.ssh_config.read_text()
    )
    config = tmp_path / "ssh_config"
    config.write_text(text)
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "true"], capture_output=True)
    assert by_ssh.returncode == 0, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"
