"""A silent paramiko connection: alive while it answers, and nothing of it left after close.

paramiko's reader thread wakes once a second when nothing arrives
(``sshconnect.IDLE_WAKE_S``, not paramiko's 0.1 s: the cost of a running job per
host), so these check what that must not change: keepalives are still
answered, output still arrives at once, and close() still ends the thread.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import paramiko
import pytest

from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.testing import LoopbackCluster
from clusterlaunch.transport import (
    Connection,
    RemoteProcess,
    SshSettings,
    close_all,
    connect_all,
    keepalive,
    sshsocket,
)
from clusterlaunch.transport.sshconfig import resolve_targets
from tests.cluster.support import write_hosts

pytestmark = pytest.mark.cluster


def _stdout_to_the_end(process: RemoteProcess, timeout: float = 30) -> bytes:
    """What ``process`` wrote to stdout until it finished (or ``timeout`` s passed)."""
    deadline = time.monotonic() + timeout
    out = b""
    while not process.finished() and time.monotonic() < deadline:
        out += process.read()[0]
        time.sleep(0.01)
    return out + process.read()[0]


def _keepalive_requests(connection: Connection, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """When ``connection``'s keepalive asked the server for a reply, from now on."""
    transport = connection._transport  # type: ignore[attr-defined]
    asked: list[float] = []
    ask = keepalive.ask

    def counted(asked_of: paramiko.Transport) -> bool:
        if asked_of is transport:
            asked.append(time.monotonic())
        return ask(asked_of)

    monkeypatch.setattr(keepalive, "ask", counted)
    return asked


def _transports() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if isinstance(t, paramiko.Transport)}


def test_a_silent_connection_stays_alive_and_ends_with_close(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    targets = resolve_targets(str(sim_cluster.ssh_config), load_inventory(hosts).hosts)
    settings = SshSettings(config_path=str(sim_cluster.ssh_config))
    before = _transports()
    connections, problems = connect_all(targets, settings)
    threads = _transports() - before
    try:
        assert not problems and len(threads) == 2
        silent = [connection.start("sleep 3; echo late") for connection in connections.values()]
        time.sleep(2.5 * settings.keepalive_interval)  # silent: only keepalives move
        assert all(connection.alive() for connection in connections.values())
        for process in silent:
            assert _stdout_to_the_end(process) == b"late\n" and process.exit_status() == 0
    finally:
        close_all(connections)
    for thread in threads:
        thread.join(timeout=10)  # wakes within IDLE_WAKE_S, sees the close, ends
    assert not [thread for thread in threads if thread.is_alive()]


def test_a_direct_connection_runs_on_the_quick_ack_socket(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """The handshake and the first channel do not wait on delayed ACKs (see sshsocket)."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    targets = resolve_targets(str(sim_cluster.ssh_config), load_inventory(hosts).hosts)
    connections, problems = connect_all(
        targets, SshSettings(config_path=str(sim_cluster.ssh_config))
    )
    try:
        assert not problems
        sock = connections["node0"]._transport.sock  # type: ignore[attr-defined]
        assert isinstance(sock, sshsocket.QuickAckSocket)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        process = connections["node0"].start("echo first")
        assert _stdout_to_the_end(process) == b"first\n" and process.exit_status() == 0
    finally:
        close_all(connections)


@pytest.mark.parametrize("route", ["direct", "ProxyCommand", "ProxyJump"])
def test_a_talking_server_is_not_asked_for_keepalives(
    sim_cluster: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """As OpenSSH's ServerAliveInterval: data that arrived within the interval proves the
    server alive, so a running job's output replaces the keepalive round trips."""
    config = tmp_path / "ssh_config"
    text = Path(sim_cluster.ssh_config).read_text()
    hop = {
        "direct": "",
        "ProxyCommand": f"    ProxyCommand ssh -F {sim_cluster.ssh_config} -W %h:%p node0\n",
        "ProxyJump": "    ProxyJump node0\n",
    }[route]
    config.write_text(text.replace("Host node1\n", f"Host node1\n{hop}"))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1)])
    targets = resolve_targets(str(config), load_inventory(hosts).hosts)
    assert (targets[0].proxy_command is not None) == (route == "ProxyCommand")
    assert bool(targets[0].proxy_jump) == (route == "ProxyJump")
    settings = SshSettings(config_path=str(config))
    connections, problems = connect_all(targets, settings)
    try:
        assert not problems
        connection = connections["node1"]
        asked = _keepalive_requests(connection, monkeypatch)
        process = connection.start(
            "i=0; while [ $i -lt 50 ]; do echo $i; i=$((i+1)); sleep 0.1; done; sleep 3.5"
        )
        out, deadline = b"", time.monotonic() + 30
        while out.count(b"\n") < 50 and time.monotonic() < deadline:
            out += process.read()[0]
            time.sleep(0.01)
        while_talking = len(asked)  # ~5 s of output: 5 round trips before
        out += _stdout_to_the_end(process)  # then 3.5 s of silence, still running: asked
        assert out.split() == [b"%d" % i for i in range(50)] and process.exit_status() == 0
        assert connection.alive()
        assert while_talking <= 1 and len(asked) >= while_talking + 2, asked
    finally:
        close_all(connections)


def test_keepalives_ask_only_while_a_command_runs(
    sim_cluster: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a running command's host can be lost: an idle connection costs no round trips."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    targets = resolve_targets(str(sim_cluster.ssh_config), load_inventory(hosts).hosts)
    settings = SshSettings(config_path=str(sim_cluster.ssh_config))
    connections, problems = connect_all(targets, settings)
    try:
        assert not problems
        connection = connections["node0"]
        asked = _keepalive_requests(connection, monkeypatch)
        time.sleep(2.5 * settings.keepalive_interval)  # connected, nothing started yet
        assert asked == [] and connection.alive()
        process = connection.start("sleep 3.5; echo done")  # silent while it runs
        assert _stdout_to_the_end(process) == b"done\n" and process.exit_status() == 0
        while_running = len(asked)
        time.sleep(2.5 * settings.keepalive_interval)  # done: idle again
        assert while_running >= 2 and len(asked) == while_running, asked
        assert connection.alive()
    finally:
        close_all(connections)


def test_answers_keep_a_silent_host_alive_and_one_thread_asks_them_all(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """The keepalive requests are sent without waiting; their answers, read by paramiko's
    reader, are what keeps a silent host alive (here past four times ``dead_after``).
    One thread asks for every connection of a run, and ends once they are closed."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    targets = resolve_targets(str(sim_cluster.ssh_config), load_inventory(hosts).hosts)
    settings = SshSettings(
        config_path=str(sim_cluster.ssh_config), keepalive_interval=0.25, dead_after=1.0
    )
    before = set(threading.enumerate())  # another test's loop may still be ending
    connections, problems = connect_all(targets, settings)
    try:
        assert not problems
        silent = [connection.start("sleep 4; echo late") for connection in connections.values()]
        for _ in range(14):  # 3.5 s of silence, looked at every 0.25 s
            time.sleep(0.25)
            assert all(connection.alive() for connection in connections.values())
        askers = [t for t in set(threading.enumerate()) - before if t.name == "keepalive"]
        assert len(askers) == 1
        for process in silent:
            assert _stdout_to_the_end(process) == b"late\n" and process.exit_status() == 0
    finally:
        close_all(connections)
    askers[0].join(timeout=5)
    assert not askers[0].is_alive()
