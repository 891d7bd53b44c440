"""A host reached at a link-local address with its zone, as ssh reaches it (root).

The host is a network namespace (tests/netns.py, IPv6 only) with a second link,
``hsn0`` (Slingshot's interface name), whose address ``fe80::1`` is reached as
``fe80::1%hsn0`` from inside that namespace. ssh expands ``%`` tokens in a config's
``HostName`` (``%%`` is one ``%``) and never in the name it is given; the paramiko
client expanded ``%h`` in both ("cannot resolve 'fe80::1fe80::1%hsn0sn0'") and left
``%%`` as written. ``ssh -F`` with the same config is the ground truth.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.netns]
ZONED = "fe80::1%hsn0"


@pytest.fixture
def zoned(netns_cluster_factory, tmp_path: Path) -> tuple[list[str], Path, str]:
    """(the prefix that runs a command in node0's namespace, an SSH config, node0's marker)."""
    cluster = netns_cluster_factory(1, ipv6=True)
    node0 = cluster.host("node0")
    inside = ["ip", "netns", "exec", cluster.namespace("node0")]
    # Removed with the namespace at the cluster's teardown.
    link = "link add hsn0 type veth peer name hsn1\naddr add fe80::1/64 dev hsn0 nodad\n"
    link += "link set hsn1 up\nlink set hsn0 up\n"
    subprocess.run(["ip", "-n", cluster.namespace("node0"), "-batch", "-"], input=link,
                   text=True, check=True)  # fmt: skip
    key = (node0.host_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"{ZONED} {key[0]} {key[1]}\n")
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host ll\n    HostName fe80::1%%hsn0\n"
        f"Host *\n    User {cluster.user}\n    IdentityFile {cluster.client_key}\n"
        f"    IdentitiesOnly yes\n    UserKnownHostsFile {known}\n"
        "    GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n"
        "    KexAlgorithms curve25519-sha256\n    BatchMode yes\n    LogLevel ERROR\n"
    )
    return inside, config, node0.marker


@pytest.mark.parametrize("host", [ZONED, "ll"])
def test_a_zoned_address_is_reached_as_ssh_reaches_it(
    zoned: tuple[list[str], Path, str], tmp_path: Path, host: str
) -> None:
    inside, config, marker = zoned
    by_ssh = subprocess.run(
        [*inside, "ssh", "-F", str(config), host, "echo $CLUSTERLAUNCH_SIM_HOST"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert by_ssh.returncode == 0 and by_ssh.stdout.strip() == marker, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [(f'"{host}"', 1)])
    for client in ("paramiko", "openssh"):
        result = exec_echo_hi(client, hosts, config=config, prefix=inside)
        assert result.returncode == 0 and "hi" in result.stdout, (client, result.stderr[-2000:])
