"""Hosts files against real sshd hosts: what a job's hosts are, as ssh reaches them.

``exec`` has no master, so a ``localhost`` node 0 is fine there; two entries that
reach the same sshd (the SSH config's port) are one host listed twice, and two entries of
one name on two ports are refused before either is dialled.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


def test_exec_runs_with_localhost_as_node0_of_several_hosts(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("localhost", 1), ("node0", 1)])
    ours = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "hi")
    assert ours.returncode == 0, ours.stderr
    assert sorted(line.split() for line in ours.stdout.splitlines()) == [
        ["[localhost]", "hi"],
        ["[node0]", "hi"],
    ]
    refused = run_cli("check", sim_cluster, str(hosts), "--no-python", "/bin/true")
    assert refused.returncode == 2
    assert "localhost cannot be the master of a multi-host job" in refused.stderr


def test_two_entries_reaching_one_sshd_are_refused_before_anything_starts(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """node0 and its address with port: its SSH config's HostName and Port differ as
    written, not as reached."""
    node0 = sim_cluster.host("node0")
    again = (node0.addr, 1, {"port": node0.port, "user": sim_cluster.user})
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), again])
    mark = tmp_path / "ran"
    ours = run_cli("exec", sim_cluster, str(hosts), "--", "touch", str(mark))
    assert ours.returncode == 2 and ours.stdout == "", ours.stderr
    (line,) = ours.stderr.splitlines()
    assert line.startswith(
        f"clusterlaunch: error: {hosts}:6: host: {node0.addr} (port: {node0.port}) reaches the "
        "same sshd as node0 at line 4 ("
    ), line
    assert line.endswith(
        f"{node0.addr}:{node0.port} after your SSH config); "
        "list each host once and raise its gpus instead"
    ), line
    assert not mark.exists()
    other = write_hosts(tmp_path / "other.yaml", [("node0", 1), ("node1", 1)])
    assert run_cli("exec", sim_cluster, str(other), "--", "true").returncode == 0


def test_one_name_on_two_ports_is_refused_before_either_port_is_dialled(tmp_path: Path) -> None:
    """Connections are kept by the name: both entries ran on the last port's sshd."""
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    ports = [listener.getsockname()[1] for listener in listeners]
    try:
        hosts = write_hosts(
            tmp_path / "hosts.yaml", [("127.0.0.1", 1, {"port": port}) for port in ports]
        )
        config = tmp_path / "ssh_config"
        config.write_text("")
        args = ("--ssh-config", str(config), "--connect-timeout", "3", str(hosts), "--", "true")
        ours = run_cli("exec", None, *args, timeout=60)
        for listener in listeners:  # nothing was dialled: no connection waits to be accepted
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()
    assert ours.returncode == 2 and ours.stdout == "", ours.stderr
    assert ours.stderr == (
        f"clusterlaunch: error: {hosts}:7: host: 127.0.0.1 (port: {ports[1]}) is also listed at "
        f"line 4 (port: {ports[0]}), and clusterlaunch keeps one connection per host name; give "
        f"each entry its own name: in your SSH config (Host c1 / HostName 127.0.0.1 / Port "
        f"{ports[1]}), then host: c1 here (or, if they are one machine, list it once and raise "
        "its gpus)\n"
    )
