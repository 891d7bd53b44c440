"""HostKeyAlgorithms as ssh follows it, for both SSH clients, against real sshd.

paramiko's client puts the key type known_hosts records first for a host in front
of the config's HostKeyAlgorithms: it negotiated a host key type the config leaves
out, and with a known RSA key and no RSA algorithm configured it raised a bare
Exception ("TODO: REPLACEME ..."), a traceback. ``ssh`` with the same config is the
ground truth.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


def _config(text: str, tmp_path: Path, algorithms: str) -> Path:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n    HostKeyAlgorithms {algorithms}\n" + text)
    return config


def test_a_known_key_type_the_config_leaves_out_is_not_negotiated(
    sim_cluster_factory, tmp_path: Path
) -> None:
    """Hosts with an Ed25519 key only, known as such; the config asks for RSA host keys:
    ssh finds no common host key type and stops (paramiko negotiated Ed25519)."""
    cluster = sim_cluster_factory(1)
    config = _config(cluster.ssh_config.read_text(), tmp_path, "rsa-sha2-512,rsa-sha2-256")
    ssh = ["ssh", "-F", str(config), "-o", "LogLevel=INFO", "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True)
    assert by_ssh.returncode == 255 and "no matching host key type" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    for client in ("paramiko", "openssh"):
        result = exec_echo_hi(client, hosts, config=config)
        assert result.returncode != 0 and result.stdout == "", (client, result.stderr)
        assert "Traceback" not in result.stderr


def test_a_known_rsa_key_with_no_rsa_algorithm_is_one_line(
    sim_cluster_factory, tmp_path: Path
) -> None:
    """known_hosts holds the hosts' RSA keys only; the config asks for Ed25519: ssh
    calls the key changed; the OpenSSH client says so, the paramiko client refuses in
    one line (it raised a bare Exception)."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, rsa_host_key=2048)
    config = _config(cluster.ssh_config.read_text(), tmp_path, "ssh-ed25519")
    by_ssh = subprocess.run(
        ["ssh", "-F", str(config), "node0", "true"], capture_output=True, text=True
    )
    assert by_ssh.returncode == 255 and "has changed" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    openssh = exec_echo_hi("openssh", hosts, config=config)
    assert openssh.returncode == 2 and "HOST KEY CHANGED" in openssh.stderr
    paramiko = exec_echo_hi("paramiko", hosts, config=config)
    assert paramiko.returncode == 2 and paramiko.stdout == ""
    assert "Traceback" not in paramiko.stderr
    assert "node0  connect  known_hosts records an RSA key for it first" in paramiko.stderr
