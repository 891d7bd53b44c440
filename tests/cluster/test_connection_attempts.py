"""ConnectionAttempts as ssh follows it, for both SSH clients, against real sshd: a host
whose sshd is not listening yet (a node still booting) is dialled again a second later,
as often as the config says; the paramiko client tried once. ``ssh`` with the same
config is the ground truth."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster, find_free_port
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


@contextmanager
def _late_relay(addr: str, port: int, to: tuple[str, int], after: float) -> Iterator[None]:
    """``addr:port`` starts listening ``after`` seconds from now and relays each
    connection to ``to`` (a host whose sshd comes up late)."""
    stop = threading.Event()

    def pipe(a: socket.socket, b: socket.socket) -> None:
        # Either direction's end closes both sockets; the other direction then reads
        # a closed socket (EBADF, which pytest reported as a thread's exception).
        with contextlib.suppress(OSError), a, b:
            while data := a.recv(65536):
                b.sendall(data)

    def serve() -> None:
        if stop.wait(after):
            return
        with socket.create_server((addr, port)) as server:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    near, _ = server.accept()
                except TimeoutError:
                    continue
                far = socket.create_connection(to)
                for ends in ((near, far), (far, near)):
                    threading.Thread(target=pipe, args=ends, daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def _config(cluster: LoopbackCluster, tmp_path: Path, port: int, attempts: int) -> Path:
    node0 = cluster.host("node0")
    (tmp_path / "known_hosts").write_text(
        cluster.known_hosts.read_text().replace(f"]:{node0.port} ", f"]:{port} ")
    )
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host node0\n    Port {port}\n    ConnectionAttempts {attempts}\n"
        f"    UserKnownHostsFile {tmp_path}/known_hosts\n" + cluster.ssh_config.read_text()
    )
    return config


@pytest.mark.parametrize("attempts", [1, 4])
def test_a_late_sshd_is_reached_when_the_config_allows_more_attempts(
    sim_cluster_factory, tmp_path: Path, attempts: int
) -> None:
    cluster = sim_cluster_factory(1)
    node0 = cluster.host("node0")
    port = find_free_port([node0.addr], start=node0.port + 100)
    config = _config(cluster, tmp_path, port, attempts)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    with _late_relay(node0.addr, port, (node0.addr, node0.port), after=1.5):
        ssh = ["ssh", "-F", str(config), "node0", "true"]
        by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert (by_ssh.returncode == 0) == (attempts > 1), by_ssh.stderr  # the ground truth
    for client in ("paramiko", "openssh"):
        with _late_relay(node0.addr, port, (node0.addr, node0.port), after=1.5):
            result = exec_echo_hi(client, hosts, config=config)
        assert (result.returncode == 0) == (attempts > 1), (client, result.stderr[-2000:])
