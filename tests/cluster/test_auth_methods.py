"""Settings under which ssh offers no key, against real sshd: ``PubkeyAuthentication no``
and a ``PreferredAuthentications`` without ``publickey``. ssh then cannot log in to
these key-only hosts; the OpenSSH client fails as ssh does; the paramiko client, which
logs in with keys only, refuses in one line (it logged in with a key). ``ssh`` with
the same config is the ground truth."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


@pytest.mark.parametrize(
    "setting", ["PubkeyAuthentication no", "PreferredAuthentications keyboard-interactive,password"]
)
def test_no_key_offered_where_ssh_offers_none(
    sim_cluster_factory, tmp_path: Path, setting: str
) -> None:
    cluster = sim_cluster_factory(1)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host node0\n    {setting}\n" + cluster.ssh_config.read_text())
    ssh = ["ssh", "-F", str(config), "-o", "LogLevel=INFO", "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 255 and "Permission denied" in by_ssh.stderr  # ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    openssh = exec_echo_hi("openssh", hosts, config=config)
    assert openssh.returncode != 0 and "Permission denied" in openssh.stderr
    paramiko = exec_echo_hi("paramiko", hosts, config=config)
    keyword, value = setting.split(" ", 1)
    assert paramiko.returncode == 2 and paramiko.stdout == ""
    assert f"{config}:2: {keyword} {value}: ssh offers no key" in paramiko.stderr
