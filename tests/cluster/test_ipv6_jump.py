"""A host at an IPv6 address behind a jump host, for both clients, against a real sshd
on ``[::1]``. The OpenSSH client's jump wrote ``ssh -W ::1:PORT``, which ssh refuses
("Bad stdio forwarding specification"); ssh's own ProxyJump writes ``-W [%h]:%p``.
``ssh -F`` with the same config is the ground truth."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


def _free_v6_port() -> int:
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
        probe.bind(("::1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def v6_host(sim_cluster_factory, tmp_path: Path) -> Iterator[tuple[object, int]]:
    """A 2-host cluster, and node1's sshd (its key, its marker) listening on [::1] too."""
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    cluster = sim_cluster_factory(2)
    node1 = cluster.host("node1")
    port = _free_v6_port()
    text = (node1.host_dir / "sshd_config").read_text()
    text = re.sub(r"(?m)^ListenAddress .*$", f"ListenAddress [::1]:{port}", text)
    text = re.sub(r"(?m)^PidFile .*$", f"PidFile {tmp_path}/v6.pid", text)
    config = tmp_path / "sshd_v6_config"
    config.write_text(text)
    log = tmp_path / "sshd_v6.log"
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", str(config), "-E", str(log)])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("::1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        yield cluster, port
    finally:
        sshd.terminate()
        sshd.wait(timeout=10)


def test_a_host_at_an_ipv6_address_is_reached_through_a_jump_host(
    v6_host: tuple[object, int], tmp_path: Path
) -> None:
    cluster, port = v6_host
    key = (cluster.host("node1").host_dir / "ssh_host_ed25519_key.pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(cluster.known_hosts.read_text() + f"[::1]:{port} {key[0]} {key[1]}\n")
    block = re.search(r"(?ms)^Host node1\n.*?(?=^Host |\Z)", cluster.ssh_config.read_text())[0]
    block = block.replace("Host node1", "Host v6")
    block = re.sub(r"HostName \S+", "HostName ::1", block)
    block = re.sub(r"Port \d+", f"Port {port}\n    ProxyJump node0", block)
    config = tmp_path / "ssh_config"
    config.write_text(
        (block + cluster.ssh_config.read_text()).replace(str(cluster.known_hosts), str(known))
    )
    by_ssh = subprocess.run(["ssh", "-F", str(config), "v6", "echo $SSH_CONNECTION"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert by_ssh.returncode == 0 and "::1" in by_ssh.stdout, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("v6", 1)])
    for client in ("paramiko", "openssh"):
        result = exec_echo_hi(client, hosts, config=config)
        assert result.returncode == 0 and "hi" in result.stdout, (client, result.stderr[-2000:])
