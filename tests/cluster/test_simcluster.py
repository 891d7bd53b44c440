"""Tests of the simulated cluster itself, driven through the real OpenSSH client."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import clusterlaunch.testing as simcluster
from clusterlaunch.testing import (
    LoopbackCluster,
    PortInUseError,
    SimClusterError,
    find_free_port,
    find_processes,
    wait_until_gone,
)
from clusterlaunch.testing.loopback import SSHD
from clusterlaunch.testing.orphans import descendants, executable, is_alive
from tests.netns import NetnsCluster

pytestmark = pytest.mark.cluster

Factory = Callable[..., LoopbackCluster]
NetnsFactory = Callable[..., NetnsCluster]
# Printed by every identity probe; the prefix keeps it apart from anything a login
# shell's startup files might print.
IDENTITY = 'echo "SIMID $CLUSTERLAUNCH_SIM_HOST $(id -un) $(hostname) $SSH_CONNECTION"'


def ssh(
    cluster: LoopbackCluster, host: str, command: str, *options: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run *command* on *host* with the OpenSSH client; *options* go before the host."""
    *prefix, name = cluster.ssh_argv(host)
    return subprocess.run(
        [*prefix, *options, name, command], capture_output=True, text=True, timeout=timeout
    )


def identities(cluster: LoopbackCluster) -> dict[str, list[str]]:
    """host name -> [marker, user, hostname, client ip, client port, server ip, port]."""
    procs = {
        h.name: subprocess.Popen(
            [*cluster.ssh_argv(h.name), IDENTITY], stdout=subprocess.PIPE, text=True
        )
        for h in cluster.hosts
    }
    found = {}
    for name, proc in procs.items():
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, f"ssh {name} failed"
        lines = [line for line in out.splitlines() if line.startswith("SIMID ")]
        assert len(lines) == 1, out
        found[name] = lines[0].split()[1:]
    return found


def sshd_processes(cluster: LoopbackCluster) -> set[int]:
    """PIDs of the cluster's sshd listeners and every sshd they forked."""
    listeners = {h.pid for h in cluster.hosts if h.pid is not None}
    return listeners | {p for p in descendants(listeners) if executable(p) == SSHD}


def test_every_host_reports_its_identity(sim_cluster: LoopbackCluster) -> None:
    found = identities(sim_cluster)
    assert set(found) == {"node0", "node1", "node2", "node3"}
    for host in sim_cluster.hosts:
        marker, user, _hostname, _cip, _cport, server_ip, server_port = found[host.name]
        assert marker == host.marker
        assert (server_ip, int(server_port)) == (host.addr, host.port)
        assert user == sim_cluster.user
    assert len(set(sim_cluster.markers())) == 4


def test_markers_are_unique_per_cluster_instance(tmp_path: Path) -> None:
    first, second = LoopbackCluster(2, tmp_path / "a"), LoopbackCluster(2, tmp_path / "b")
    assert not set(first.markers()) & set(second.markers())
    assert not (tmp_path / "a").exists(), "the constructor must not touch the disk"


def test_wrong_client_key_is_refused(sim_cluster: LoopbackCluster, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-f", str(wrong)], check=True)
    host = sim_cluster.hosts[0]

    def login(key: Path) -> subprocess.CompletedProcess[str]:
        argv = ["ssh", "-F", "/dev/null", "-i", str(key), "-p", str(host.port)]
        for opt in ("IdentitiesOnly=yes", "IdentityAgent=none", "BatchMode=yes",
                    f"UserKnownHostsFile={sim_cluster.known_hosts}",
                    "StrictHostKeyChecking=yes"):  # fmt: skip
            argv += ["-o", opt]
        return subprocess.run(
            [*argv, f"{sim_cluster.user}@{host.addr}", "true"], capture_output=True, text=True
        )

    refused = login(wrong)
    assert refused.returncode == 255
    assert "Permission denied" in refused.stderr
    assert login(sim_cluster.client_key).returncode == 0  # same command, right key


def test_unknown_host_key_is_refused(sim_cluster: LoopbackCluster, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    res = ssh(sim_cluster, "node0", "true", "-o", f"UserKnownHostsFile={empty}")
    assert res.returncode == 255
    assert "Host key verification failed" in res.stderr


def test_changed_host_key_is_refused(sim_cluster: LoopbackCluster, tmp_path: Path) -> None:
    lines = sim_cluster.known_hosts.read_text().splitlines()
    # node0's address with node1's key: what a re-keyed or impostor host looks like.
    changed = tmp_path / "known_hosts"
    changed.write_text(f"{lines[0].split()[0]} {' '.join(lines[1].split()[1:])}\n")
    res = ssh(sim_cluster, "node0", "true", "-o", f"UserKnownHostsFile={changed}")
    assert res.returncode == 255
    assert "HOST IDENTIFICATION HAS CHANGED" in res.stderr
    assert "Host key verification failed" in res.stderr


def test_orphan_detector_finds_detached_processes(sim_cluster: LoopbackCluster) -> None:
    starts = {
        "node1": "nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!",
        "node2": "setsid sleep 300 >/dev/null 2>&1 </dev/null & echo $!",
    }
    pids = {}
    for name, command in starts.items():
        res = ssh(sim_cluster, name, command)
        assert res.returncode == 0, res.stderr
        pids[name] = int(res.stdout.split()[-1])
    try:
        # `echo $!` may run before the background job has exec()ed sleep: poll.
        deadline = time.monotonic() + 5
        while True:
            found = {p.pid: p for p in find_processes(sim_cluster.markers())}
            execed = all(
                pid in found and found[pid].cmdline == "sleep 300" for pid in pids.values()
            )
            if execed or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        for name, pid in pids.items():
            assert pid in found, f"{name}: sleep {pid} not found in {list(found.values())}"
            assert found[pid].marker == sim_cluster.host(name).marker
            assert found[pid].cmdline == "sleep 300"
            assert found[pid].state != "Z"
        # Another cluster instance's markers never match these processes.
        assert find_processes(LoopbackCluster(4, "/nonexistent").markers()) == []
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert wait_until_gone(sim_cluster.markers(), timeout=5.0) == []


def test_eight_hosts_start_fast_and_stop_clean(
    sim_cluster_factory: Factory, record_property: Callable[[str, object], None]
) -> None:
    began = time.perf_counter()
    cluster = sim_cluster_factory(8)
    elapsed = time.perf_counter() - began
    print(f"\n8 simulated hosts up in {elapsed:.3f} s (fresh keys)")
    record_property("start_8_hosts_s", round(elapsed, 3))
    assert elapsed < 2.0
    # Hold a session open so that per-connection sshd processes exist during stop().
    # `cat` ends by itself once its connection is gone, so it leaves no orphan.
    session = subprocess.Popen(
        [*cluster.ssh_argv("node7"), "echo ready; exec cat"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert session.stdout is not None
    assert session.stdout.readline() == "ready\n"
    sshd = sshd_processes(cluster)
    assert len(sshd) > 8, "expected per-connection sshd processes"
    cluster.stop()
    session.communicate(timeout=10)
    deadline = time.monotonic() + 5
    while (alive := {p for p in sshd if is_alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive, f"sshd processes survived stop(): {sorted(alive)}"
    assert all(h.pid is None for h in cluster.hosts)
    cluster.stop()  # idempotent


def test_32_hosts(sim_cluster_factory: Factory) -> None:
    began = time.perf_counter()
    cluster = sim_cluster_factory(32)
    print(f"\n32 simulated hosts up in {time.perf_counter() - began:.3f} s")
    # Reaching the last host is enough: start() saw every host accept connections.
    assert ssh(cluster, "node31", IDENTITY).stdout.split()[-2:] == ["127.0.0.42", str(cluster.port)]


def test_kill_host_simulates_host_loss(sim_cluster_factory: Factory) -> None:
    cluster = sim_cluster_factory(2)
    ssh(cluster, "node1", "nohup sleep 300 >/dev/null 2>&1 </dev/null &")
    killed = cluster.kill_host("node1")
    assert [p.cmdline for p in killed] == ["sleep 300"]
    assert ssh(cluster, "node1", "true").returncode == 255
    assert ssh(cluster, "node0", "true").returncode == 0
    assert cluster.host("node1").pid is None
    with pytest.raises(SimClusterError):
        cluster.kill_host("node1")


def test_port_in_use_is_reported(tmp_path: Path) -> None:
    port = find_free_port(["127.0.0.11"], 22400)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.11", port))
        blocker.listen()
        cluster = LoopbackCluster(2, tmp_path, port=port)
        with pytest.raises(PortInUseError, match=f"port {port} is already in use"):
            cluster.start()
        assert all(h.pid is None for h in cluster.hosts)


def test_write_hosts_yaml(tmp_path: Path) -> None:
    cluster = LoopbackCluster(2, tmp_path)
    path = cluster.write_hosts_yaml(tmp_path / "hosts.yaml", gpus=2, ssh_config=tmp_path / "c")
    yaml = pytest.importorskip("yaml")
    assert yaml.safe_load(path.read_text()) == {
        "hosts": [{"host": "node0", "gpus": 2}, {"host": "node1", "gpus": 2}],
        "defaults": {"ssh_config": str(tmp_path / "c")},
    }


def test_cli_up_and_down(tmp_path: Path) -> None:
    root = Path(simcluster.__file__).resolve().parents[2]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    )
    cli = [sys.executable, "-m", "clusterlaunch.testing"]
    sandbox = tmp_path / "sandbox"
    port = find_free_port(["127.0.0.11", "127.0.0.12"], 22500)
    up = [*cli, "up", "--hosts", "2", "--dir", str(sandbox), "--port", str(port)]
    subprocess.run(up, check=True, env=env, capture_output=True, timeout=60)
    state = json.loads((sandbox / "simcluster.json").read_text())
    pids = [h["pid"] for h in state["hosts"]]
    try:
        assert all(is_alive(pid) for pid in pids), "sshd must outlive `up`"
        res = subprocess.run(
            ["ssh", "-F", str(sandbox / "ssh_config"), "node1", IDENTITY],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert state["hosts"][1]["marker"] in res.stdout
    finally:
        subprocess.run([*cli, "down", "--dir", str(sandbox)], check=True, env=env, timeout=60)
    assert not sandbox.exists()
    assert not any(is_alive(pid) for pid in pids)


# -- namespace tier ------------------------------------------------------------------------
# The test's own interpreter, by absolute path: skips the pyenv shim behind `python3`.
PYTHON = shlex.quote(sys.executable)
CONNECT = (
    f"{PYTHON} -c 'import socket,sys; socket.create_connection((sys.argv[1], 22), timeout=1)' "
)


@pytest.mark.netns
def test_netns_hosts_have_own_identity(netns_cluster_factory: NetnsFactory) -> None:
    cluster = netns_cluster_factory(3)
    found = identities(cluster)
    resolve = f"{PYTHON} -c 'import socket; print(socket.gethostbyname(socket.gethostname()))'"
    for host in cluster.hosts:
        marker, _user, hostname, client_ip, _cport, server_ip, _sport = found[host.name]
        assert (marker, hostname, server_ip) == (host.marker, host.name, host.addr)
        assert client_ip == host.addr.rsplit(".", 1)[0] + ".1"  # the bridge
        # gloo needs a host's own name to resolve to its bridge address, not 127.0.0.1.
        assert ssh(cluster, host.name, resolve).stdout.split()[-1] == host.addr
    other = cluster.hosts[2]
    assert ssh(cluster, "node0", f"getent hosts {other.name}").stdout.split()[0] == other.addr


@pytest.mark.netns
def test_netns_partition_and_heal(netns_cluster_factory: NetnsFactory) -> None:
    cluster = netns_cluster_factory(2)
    target = cluster.host("node1").addr
    assert ssh(cluster, "node0", CONNECT + target).returncode == 0
    cluster.partition("node1")
    assert ssh(cluster, "node0", CONNECT + target).returncode != 0
    assert ssh(cluster, "node1", "true", "-o", "ConnectTimeout=1").returncode == 255
    cluster.heal("node1")
    assert ssh(cluster, "node0", CONNECT + target).returncode == 0
    assert ssh(cluster, "node1", "true").returncode == 0


def _netns_leftovers(cluster: NetnsCluster) -> list[str]:
    names = [cluster.bridge] + [cluster.namespace(n) for n in cluster.names]
    names += [cluster.veth(n) for n in cluster.names]
    listing = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    listing += subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    words = {w.split("@")[0] for w in listing.split()}
    files = [str(p) for p in Path("/etc/netns").glob(f"{cluster.namespace('node0')[:-1]}*")]
    return sorted(set(names) & words) + files


@pytest.mark.netns
def test_netns_stop_removes_everything(netns_cluster_factory: NetnsFactory) -> None:
    cluster = netns_cluster_factory(2)
    assert len(_netns_leftovers(cluster)) == 1 + 2 * 2 + 2  # bridge, ns+veth, files
    ssh(cluster, "node1", "setsid sleep 300 >/dev/null 2>&1 </dev/null &")
    sshd = sshd_processes(cluster)
    killed = cluster.stop()
    assert [p.cmdline for p in killed] == ["sleep 300"]  # reported, and gone
    assert find_processes(cluster.markers()) == []
    assert not [p for p in sshd if is_alive(p)]
    assert _netns_leftovers(cluster) == []


@pytest.mark.netns
def test_netns_failed_start_cleans_up(tmp_path: Path, netns_cluster_factory: NetnsFactory) -> None:
    class Broken(NetnsCluster):
        def _launch_prefix(self, host: simcluster.SimHost) -> list[str]:
            return ["false"]  # exits at once instead of running sshd

    cluster = Broken(2, tmp_path / "broken")
    with pytest.raises(SimClusterError, match="exited during startup"):
        cluster.start()
    assert _netns_leftovers(cluster) == []
