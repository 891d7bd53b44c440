"""A server that offers only what ssh no longer offers by default (CBC, 3DES, MD5): the
paramiko client refuses it as ssh does, unless the config adds it (``Ciphers
+aes128-cbc``). paramiko's own defaults had them, so it connected where ssh said
"no matching cipher". ``ssh`` with the same config is the ground truth."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing.sshvariants import SshVariantCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

ECHO = ("--", "sh", "-c", "echo $CLUSTERLAUNCH_SIM_HOST")


@pytest.mark.parametrize(
    ("server", "added", "connects"),
    [
        ({"ciphers": "aes128-cbc"}, "", False),
        ({"ciphers": "3des-cbc"}, "", False),
        ({"ciphers": "aes128-ctr", "macs": "hmac-md5"}, "", False),
        ({"ciphers": "aes128-cbc"}, "Ciphers +aes128-cbc", True),
        ({"ciphers": "aes128-ctr", "macs": "hmac-md5"}, "MACs +hmac-md5", True),
    ],
    ids=["aes-cbc", "3des", "md5", "aes-cbc added", "md5 added"],
)
def test_the_paramiko_client_offers_what_ssh_offers(
    sim_cluster_factory, tmp_path: Path, server: dict[str, str], added: str, connects: bool
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, log_ciphers=True, **server)
    if added:
        with cluster.ssh_config.open("a") as config:
            config.write(f"Host *\n    {added}\n")
    ssh = ["ssh", "-F", str(cluster.ssh_config), "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert (by_ssh.returncode == 0) == connects, by_ssh.stderr  # the ground truth
    before = len(cluster.ciphers_used("node0"))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = run_cli("exec", cluster, "--ssh-client", "paramiko", str(hosts), *ECHO)
    assert (result.returncode == 0) == connects, result.stderr[-2000:]
    if connects:
        assert cluster.ciphers_used("node0")[before:] == [server["ciphers"]]
    else:
        assert result.returncode == 2 and result.stdout == ""
        assert "in common with the server" in result.stderr and "Traceback" not in result.stderr
