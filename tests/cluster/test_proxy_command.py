"""ProxyCommand as ssh runs it, for both SSH clients, against real sshd: its ``%p`` and
``%r`` are the hosts file's ``port:`` and ``user:`` (ssh's ``-p``/``-l``), and the
command is shell code (``$SHELL -c "exec ..."``), so a redirection works. The paramiko
client took the config's Port and split the command itself, running no shell."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_proxy_command_reaches_the_hosts_file_port_through_a_shell(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(2)
    node1 = cluster.host("node1")
    config = tmp_path / "ssh_config"
    proxy = f"ssh -F {cluster.ssh_config} -W %h:%p node0 2>/dev/null"
    config.write_text(
        f"Host node1\n    Port 1\n    ProxyCommand {proxy}\n" + cluster.ssh_config.read_text()
    )
    ssh = ["ssh", "-F", str(config), "-p", str(node1.port), "node1", "echo", "hi"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0 and by_ssh.stdout == "hi\n", by_ssh.stderr  # ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1, {"port": node1.port})])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node1] hi\n"


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_proxy_command_quoted_at_both_ends_runs_as_written(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """ssh runs the rest of the line as written; paramiko took a value that opens and
    closes with a quote as quoted, and ran ``ssh" -F ... "node0``: no such command."""
    cluster = sim_cluster_factory(2)
    config = tmp_path / "ssh_config"
    proxy = f'"ssh" -F {cluster.ssh_config} -W %h:%p "node0"'
    config.write_text(f"Host node1\n    ProxyCommand {proxy}\n" + cluster.ssh_config.read_text())
    ssh = ["ssh", "-F", str(config), "node1", "echo", "hi"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0 and by_ssh.stdout == "hi\n", by_ssh.stderr  # ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node1] hi\n"


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_failing_proxy_command_runs_once_and_its_words_are_the_error(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """The OpenSSH client ran it 4 times (handshake retries), lost its stderr and named an
    address never dialled ("no SSH handshake with 127.0.0.12:22222: Connection closed by
    UNKNOWN port 65535"). ssh runs it once and prints its stderr; so does clusterlaunch."""
    cluster = sim_cluster_factory(1)
    ran = tmp_path / "ran.log"
    proxy = f'sh -c "echo ran >> {ran}; echo no-route-to-bastion >&2; exit 1"'
    config = tmp_path / "ssh_config"
    config.write_text(f"Host node0\n    ProxyCommand {proxy}\n" + cluster.ssh_config.read_text())
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode != 0 and result.stdout == ""
    assert f"ProxyCommand {proxy!r}" in result.stderr, result.stderr
    assert "no-route-to-bastion" in result.stderr and "UNKNOWN" not in result.stderr
    assert ran.read_text() == "ran\n"


def test_a_silent_proxy_command_is_a_timeout_not_our_own_sigterm(
    sim_cluster_factory, tmp_path: Path
) -> None:
    """paramiko: a ProxyCommand that never answers, under ConnectTimeout 2, was reported as
    "exited with status -15: it printed nothing": the status of clusterlaunch's own kill."""
    cluster = sim_cluster_factory(1)
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host node0\n    ProxyCommand sleep 30\n    ConnectTimeout 2\n    ConnectionAttempts 1\n"
        + cluster.ssh_config.read_text()
    )
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi("paramiko", hosts, config=config)
    assert result.returncode != 0 and result.stdout == ""
    assert "status -15" not in result.stderr, result.stderr
    assert "ProxyCommand 'sleep 30'" in result.stderr and "2 s" in result.stderr, result.stderr
