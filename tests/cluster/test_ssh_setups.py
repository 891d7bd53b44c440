"""SSH as real sites set it up: Include, host and user certificates, bastions, flaky handshakes.

Real sshd hosts (:class:`SshVariantCluster`); both SSH clients. The OpenSSH
client reaches everything ``ssh`` reaches; paramiko reaches the same hosts for
Include and refuses, in one line naming the setting, what it cannot honour.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.testing import SimHost, SshVariantCluster, find_processes
from tests.cluster.support import rank_lines, run_cli, write_hosts

pytestmark = [pytest.mark.cluster]
ECHO = ("--", "sh", "-c", "echo $CLUSTERLAUNCH_SIM_HOST")


def _hosts(cluster: SshVariantCluster, tmp_path: Path, gpus: int = 1) -> Path:
    return write_hosts(tmp_path / "hosts.yaml", [(name, gpus) for name in cluster.names])


def _reached(stdout: str) -> set[str]:
    return set(re.findall(r"^\[(node\d+)\]\s+[0-9a-f]{12}-\1$", stdout, re.MULTILINE))


@pytest.mark.torch
def test_included_hosts_with_cert_authority_only_run_and_exec_over_openssh(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(3, cls=SshVariantCluster, host_ca=True, include=True)
    assert cluster.known_hosts.read_text().startswith("@cert-authority * ")
    hosts = _hosts(cluster, tmp_path)
    exec_ = run_cli("exec", cluster, "--ssh-client", "openssh", str(hosts), *ECHO)
    assert exec_.returncode == 0, exec_.stderr
    assert _reached(exec_.stdout) == set(cluster.names)
    run = run_cli("run", cluster, "--ssh-client", "openssh", str(hosts), "allreduce.py")
    assert run.returncode == 0, run.stderr
    assert sorted(rank for rank, *_ in rank_lines(run.stdout)) == [0, 1, 2]
    assert "SUM=6" in run.stdout


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_both_clients_resolve_included_hosts_alike(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(2, cls=SshVariantCluster, include=True)
    hosts = _hosts(cluster, tmp_path)
    # The plan names each host's HostName from the included file, not the alias.
    dry = run_cli("run", cluster, "--dry-run", "--json", str(hosts), "allreduce.py")
    assert json.loads(dry.stdout)["master_addr"] == cluster.host("node0").addr
    result = run_cli("exec", cluster, "--ssh-client", client, str(hosts), *ECHO)
    assert result.returncode == 0, result.stderr
    assert _reached(result.stdout) == {"node0", "node1"}


def _key_name_by_ssh(written: str, host: SimHost) -> str:
    """What ssh names ``written`` for ``host`` (the config's user: this one)."""
    here, user = socket.gethostname(), pwd.getpwuid(os.getuid()).pw_name
    return {
        "id_%l_%L": f"id_{here}_{here.split('.')[0]}",
        "k_%n_%p_%r_%i_%%": f"k_{host.name}_{host.port}_{user}_{os.getuid()}_%",
        "k_%h_%k_%u": f"k_{host.addr}_{host.name}_{user}",
    }[written]


@pytest.mark.parametrize("written", ["id_%l_%L", "k_%n_%p_%r_%i_%%", "k_%h_%k_%u"])
@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_an_identity_file_named_with_tokens_is_the_one_ssh_uses(
    sim_cluster_factory, tmp_path: Path, client: str, written: str
) -> None:
    """IdentityFile .../id_%l_%L (a key per machine in a shared home), or named by the
        host's alias, port, user, ...: the key exists only under the name ssh gives it, and
        ssh reaches the host with it. paramiko named %l after the DNS ("localhost" here),
        left %L, %n, %p, %i, %k and %% as written, and knew nothing of the hosts file (the
    paramiko cases fail on that lookup). The OpenSSH client leaves the naming to ssh."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster)
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(cluster.client_key, keys / _key_name_by_ssh(written, cluster.host("node0")))
    config = tmp_path / "ssh_config"
    named = f"IdentityFile {keys}/{written}"
    text = re.sub(
        r"(?m)^\s*IdentityFile .*$", lambda _: "    " + named, cluster.ssh_config.read_text()
    )
    config.write_text(text)
    by_ssh = subprocess.run(
        ["ssh", "-F", str(config), "node0", "true"], capture_output=True, text=True, timeout=60
    )
    assert by_ssh.returncode == 0, by_ssh.stderr  # ssh itself: the ground truth
    hosts = _hosts(cluster, tmp_path)
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), *ECHO)
    result = run_cli("exec", None, *args, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert _reached(result.stdout) == {"node0"}


@pytest.mark.parametrize(
    ("asked", "offered", "agreed"),
    [
        (None, None, "aes128-gcm@openssh.com"),  # nothing configured: AES-GCM first
        (None, "aes256-ctr,aes128-ctr", "aes128-ctr"),  # a server without it
        ("aes256-ctr", None, "aes256-ctr"),  # the client config's Ciphers, as ssh would
    ],
)
def test_paramiko_negotiates_ciphers_as_the_config_and_the_server_say(
    sim_cluster_factory, tmp_path: Path, asked: str | None, offered: str | None, agreed: str
) -> None:
    """AES-GCM first when the config says nothing: its MAC is part of the cipher, where
    aes-ctr's HMAC-SHA2 took a fifth of the controller's CPU for 10M lines."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, ciphers=offered, log_ciphers=True)
    if asked:
        with cluster.ssh_config.open("a") as config:
            config.write(f"Host *\n    Ciphers {asked}\n")
    before = len(cluster.ciphers_used("node0"))  # the readiness check's
    result = run_cli("exec", cluster, "--ssh-client", "paramiko", str(_hosts(cluster, tmp_path)),
                     *ECHO)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _reached(result.stdout) == {"node0"}
    assert cluster.ciphers_used("node0")[before:] == [agreed]


def test_ciphers_paramiko_lacks_are_refused_in_one_line_and_openssh_uses_them(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, log_ciphers=True)
    with cluster.ssh_config.open("a") as config:
        config.write("Host *\n    Ciphers chacha20-poly1305@openssh.com\n")
    line = len(cluster.ssh_config.read_text().splitlines())
    hosts = str(_hosts(cluster, tmp_path))
    before = len(cluster.ciphers_used("node0"))
    refused = run_cli("exec", cluster, "--ssh-client", "paramiko", hosts, *ECHO)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        f"clusterlaunch: error: node0: {cluster.ssh_config}:{line}: Ciphers "
        "chacha20-poly1305@openssh.com: paramiko has none of these; use --ssh-client openssh"
    ]
    assert len(cluster.ciphers_used("node0")) == before  # nothing connected
    used = run_cli("exec", cluster, "--ssh-client", "openssh", hosts, *ECHO)
    assert used.returncode == 0, used.stderr
    assert cluster.ciphers_used("node0")[before:] == ["chacha20-poly1305@openssh.com"]


def test_ssh_client_in_the_hosts_file_picks_openssh_and_the_flag_wins(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(2, cls=SshVariantCluster, host_ca=True)
    hosts = _hosts(cluster, tmp_path)
    hosts.write_text("ssh_client: openssh\n" + hosts.read_text())
    reached = run_cli("exec", cluster, str(hosts), *ECHO)  # certificates: openssh only
    assert reached.returncode == 0, reached.stderr
    assert _reached(reached.stdout) == set(cluster.names)
    refused = run_cli("exec", cluster, "--ssh-client", "paramiko", str(hosts), *ECHO)
    assert refused.returncode == 2
    assert f"{cluster.known_hosts}:1: @cert-authority" in refused.stderr


def test_paramiko_refuses_host_certificates_in_one_line(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(2, cls=SshVariantCluster, host_ca=True, include=True)
    marker = tmp_path / "started"
    hosts = _hosts(cluster, tmp_path)
    result = run_cli(
        "exec", cluster, "--ssh-client", "paramiko", str(hosts), "--", "touch", str(marker)
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{cluster.known_hosts}:1: @cert-authority" in lines[0]
    assert "--ssh-client openssh" in lines[0] and "Traceback" not in result.stderr
    assert not marker.exists()
    assert not find_processes(cluster.markers())


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_cert_authority_line_no_longer_breaks_plain_key_hosts(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    ca = "AAAAC3NzaC1lZDI1NTE5AAAAIN5gnNP1GyQRzR8XWXyP1PtVCGbTHozmWflzzbv9VwPC"
    with cluster.known_hosts.open("a") as known:  # another site's CA, as in a real file
        known.write(f"@cert-authority *.example.org ssh-ed25519 {ca}\n")
    hosts = _hosts(cluster, tmp_path)
    result = run_cli("exec", cluster, "--ssh-client", client, str(hosts), *ECHO)
    assert result.returncode == 0, result.stderr
    assert _reached(result.stdout) == {"node0"}


def test_user_certificate_openssh_uses_it_paramiko_names_the_line(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(2, cls=SshVariantCluster, user_ca=True, include=True)
    hosts = _hosts(cluster, tmp_path)
    result = run_cli("exec", cluster, "--ssh-client", "openssh", str(hosts), *ECHO)
    assert result.returncode == 0, result.stderr
    assert _reached(result.stdout) == {"node0", "node1"}
    refused = run_cli("exec", cluster, "--ssh-client", "paramiko", str(hosts), *ECHO)
    assert refused.returncode == 2
    included = sorted(cluster.include_dir.glob("*.conf"))[-1]  # the Host * block, line 2
    assert f"{included}:2: CertificateFile" in refused.stderr
    assert "--ssh-client openssh" in refused.stderr


def _behind(cluster: SshVariantCluster, tmp_path: Path, jumps: dict[str, str]) -> Path:
    """The cluster's ssh config with ``ProxyJump`` set for the hosts named in ``jumps``."""
    config = tmp_path / "ssh_config"
    text = cluster.ssh_config.read_text()
    for name, via in jumps.items():
        text = text.replace(f"Host {name}\n", f"Host {name}\n    ProxyJump {via}\n")
    config.write_text(text)
    return config


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_32_hosts_behind_a_throttling_bastion_share_one_connection(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(
        33, cls=SshVariantCluster, max_startups="10:30:60", count_connections=True
    )
    targets = cluster.names[1:]  # node0 is the bastion
    config = _behind(cluster, tmp_path, {name: "node0" for name in targets})
    hosts = write_hosts(tmp_path / "hosts.yaml", [(name, 1) for name in targets])
    bastion_log = cluster.host("node0").host_dir / "sshd.log"
    logins_before = bastion_log.read_text().count("Accepted publickey")
    connections_before = cluster.connections_to("node0")
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), *ECHO)
    result = run_cli("exec", None, *args, timeout=300)
    # The bastion's own account too: its connection once failed at the end (paramiko).
    bastion_said = bastion_log.read_text()[-3000:]
    assert result.returncode == 0, f"{result.stderr[-3000:]}\nbastion's sshd:\n{bastion_said}"
    assert _reached(result.stdout) == set(targets)
    # Counted by the bastion's sshd: one TCP connection, one login, for 32 targets.
    assert cluster.connections_to("node0") - connections_before == 1
    assert bastion_log.read_text().count("Accepted publickey") - logins_before == 1


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_chain_of_jump_hosts_shares_its_first_hop(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(6, cls=SshVariantCluster, count_connections=True)
    targets = cluster.names[2:]  # node0, then node1: ProxyJump node0,node1
    config = _behind(cluster, tmp_path, {name: "node0,node1" for name in targets})
    hosts = write_hosts(tmp_path / "hosts.yaml", [(name, 1) for name in targets])
    before = {name: cluster.connections_to(name) for name in ("node0", "node1")}
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), *ECHO)
    result = run_cli("exec", None, *args, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _reached(result.stdout) == set(targets)
    # The first hop is shared; the second is each target's own (through the first).
    assert cluster.connections_to("node0") - before["node0"] == 1
    assert cluster.connections_to("node1") - before["node1"] == len(targets)


@pytest.fixture
def flaky_port(sim_cluster_factory) -> Iterator[tuple[SshVariantCluster, int]]:
    """A TCP relay to node0's sshd that hangs up on its first two connections."""
    cluster = sim_cluster_factory(1, cls=SshVariantCluster)
    host = cluster.host("node0")
    listener = socket.create_server(("127.0.0.1", 0))
    dropped = [0]

    def relay(client: socket.socket) -> None:
        with client, socket.create_connection((host.addr, host.port)) as server:
            pipes = [
                threading.Thread(target=_pipe, args=(a, b), daemon=True)
                for a, b in ((client, server), (server, client))
            ]
            for pipe in pipes:
                pipe.start()
            for pipe in pipes:
                pipe.join()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if dropped[0] < 2:
                dropped[0] += 1
                client.close()  # as sshd's MaxStartups does: before the banner
                continue
            threading.Thread(target=relay, args=(client,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield cluster, listener.getsockname()[1]
    finally:
        listener.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_dropped_handshake_is_retried_and_logged(flaky_port, tmp_path: Path, client: str) -> None:
    cluster, port = flaky_port
    known = tmp_path / "known_hosts"
    key = cluster.known_hosts.read_text().split()[1:3]
    known.write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    config = tmp_path / "ssh_config"
    block = cluster.ssh_config.read_text().replace("Host node0\n", "Host flaky\n")
    block = re.sub(r"HostName \S+", "HostName 127.0.0.1", block)
    block = re.sub(r"Port \d+", f"Port {port}", block)
    config.write_text(block.replace(str(cluster.known_hosts), str(known)))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("flaky", 1)])
    logs = tmp_path / "logs"
    args = ("--ssh-client", client, "--ssh-config", str(config), "--log-dir", str(logs))
    result = run_cli("exec", None, *args, "--verbose", str(hosts), *ECHO)
    assert result.returncode == 0, result.stderr
    assert "-node0" in result.stdout
    log = (logs / "controller.log").read_text()
    assert "flaky: no SSH handshake with 127.0.0.1" in log
    assert "retry 1/3" in log and "retry 2/3" in log and "retry 3/3" not in log
    # --verbose: the same notes on the console (without it: controller.log only, unit-tested).
    said = [line for line in result.stderr.splitlines() if "retry" in line]
    assert len(said) == 2 and all(line.startswith("clusterlaunch: flaky: ") for line in said)
