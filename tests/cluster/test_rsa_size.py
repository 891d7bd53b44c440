"""RequiredRSASize as ssh follows it, for both SSH clients, against real sshd: an RSA
key smaller than it is not offered, and a server whose RSA host key is smaller is
refused ("Bad server host key: Invalid key length"). Fedora's and RHEL's crypto
policy sets it (2048); the paramiko client used such keys. ``ssh`` with the same
config is the ground truth."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


def _both(config: Path, tmp_path: Path, ok: bool, said: str) -> None:
    """ssh, then each client, with ``config``: all log in (``ok``) or none does."""
    by_ssh = subprocess.run(
        ["ssh", "-F", str(config), "node0", "true"], capture_output=True, text=True
    )
    assert (by_ssh.returncode == 0) == ok, by_ssh.stderr  # the ground truth
    assert ok or said in by_ssh.stderr, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    for client in ("paramiko", "openssh"):
        result = exec_echo_hi(client, hosts, config=config)
        if ok:
            assert result.returncode == 0, result.stderr[-2000:]
        else:
            assert result.returncode != 0 and result.stdout == "", (client, result.stderr)


@pytest.mark.parametrize("required", [None, 2048])
def test_a_small_rsa_user_key_is_not_offered(
    sim_cluster_factory, tmp_path: Path, required: int | None
) -> None:
    cluster = sim_cluster_factory(1)
    key = tmp_path / "rsa1024"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "rsa", "-b", "1024", "-N", "", "-f", str(key)], check=True
    )
    cluster.authorized_keys.write_text(Path(f"{key}.pub").read_text())  # the only key it takes
    text = re.sub(
        r"(?m)^\s*IdentityFile .*$", f"    IdentityFile {key}", cluster.ssh_config.read_text()
    )
    setting = f"Host *\n    RequiredRSASize {required}\n" if required else ""
    config = tmp_path / "ssh_config"
    config.write_text(setting + text)
    _both(config, tmp_path, ok=required is None, said="Permission denied")


@pytest.mark.parametrize("required", [None, 2048])
def test_a_small_rsa_host_key_is_refused(
    sim_cluster_factory, tmp_path: Path, required: int | None
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, rsa_host_key=1024)
    setting = f"Host *\n    RequiredRSASize {required}\n" if required else ""
    config = tmp_path / "ssh_config"
    config.write_text(setting + cluster.ssh_config.read_text())
    _both(config, tmp_path, ok=required is None, said="Invalid key length")
