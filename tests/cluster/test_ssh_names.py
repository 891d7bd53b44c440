"""Names as ssh gives them: a mixed-case HostName, known_hosts files named by tokens.

ssh lowercases the host name before it checks or records the host key
(``[mixed.example]:PORT`` in known_hosts) and before it expands ``%h``. paramiko
looked the key up under the name as written, so a host ssh knows was "unknown"
to the paramiko client (refused under StrictHostKeyChecking yes, recorded a
second time under accept-new). ssh also expands the tokens of UserKnownHostsFile
(``known_hosts.d/%h``), which paramiko's lookup left as written, and finds a host
under a known_hosts pattern line (``[10.1.2.*]:*``), which paramiko never matched:
a host ssh knows was unknown to it, and a key ssh refuses as changed was recorded
under accept-new. Under HashKnownHosts yes ssh records a hashed name, which paramiko
wrote in the clear. Real sshd, real ssh as the ground truth.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import exec_echo_hi, recorded_key, write_hosts

pytestmark = [pytest.mark.cluster]


def _mixed_case_config(cluster: LoopbackCluster, tmp_path: Path) -> tuple[Path, Path]:
    """node0 as ``HostName MiXeD.Example`` (reached through ``ssh -W`` to its sshd),
    with a known_hosts file of its own, empty, and a key named by ``%h``."""
    host = cluster.host("node0")
    known = tmp_path / "known_hosts"
    known.write_text("")
    key = tmp_path / "k_mixed.example"  # the name ssh gives k_%h
    key.write_bytes(cluster.client_key.read_bytes())
    key.chmod(0o600)
    hop = f"ProxyCommand ssh -F {cluster.ssh_config} -W {host.addr}:{host.port} node0"
    text = cluster.ssh_config.read_text().split("\nHost ", 1)[0]  # node0's block only
    text = re.sub(r"(?m)^\s*HostName .*$", "    HostName MiXeD.Example\n    " + hop, text)
    text = re.sub(r"(?m)^\s*UserKnownHostsFile .*$", f"    UserKnownHostsFile {known}", text)
    text = re.sub(r"(?m)^\s*IdentityFile .*$", f"    IdentityFile {tmp_path}/k_%h", text)
    config = tmp_path / "ssh_config"
    config.write_text(text + "\n")
    return config, known


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_mixed_case_host_name_uses_the_key_ssh_recorded(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    config, known = _mixed_case_config(cluster, tmp_path)
    # ssh itself, accepting the new key: the ground truth of the name it records.
    first = ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=accept-new", "node0", "true"]
    by_ssh = subprocess.run(first, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0, by_ssh.stderr
    recorded = known.read_text()
    assert recorded.startswith(f"[mixed.example]:{cluster.host('node0').port} "), recorded
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)  # the config says strict: yes
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert known.read_text() == recorded  # nothing recorded a second time


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_known_hosts_file_named_by_tokens_is_the_one_ssh_reads(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    host = cluster.host("node0")
    named = tmp_path / "known_hosts.d"
    named.mkdir()  # the host's key only in the file ssh names for it
    (named / f"{host.addr}_node0").write_text(cluster.known_hosts.read_text())
    config = tmp_path / "ssh_config"
    written = f"UserKnownHostsFile {named}/%h_%n"
    text = re.sub(
        r"(?m)^\s*UserKnownHostsFile .*$", "    " + written, cluster.ssh_config.read_text()
    )
    config.write_text(text)
    by_ssh = subprocess.run(  # StrictHostKeyChecking yes, as the config says
        ["ssh", "-F", str(config), "node0", "true"], capture_output=True, text=True, timeout=60
    )
    assert by_ssh.returncode == 0, by_ssh.stderr  # ssh itself: the ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"


def _known_under_a_pattern(cluster: LoopbackCluster, key_of: str) -> str:
    """known_hosts as one pattern line for node0 (any port), holding ``key_of``'s key."""
    text = f"[{cluster.host('node0').addr}]:* {recorded_key(cluster, key_of)}\n"
    cluster.known_hosts.write_text(text)
    return text


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_host_known_under_a_pattern_line_is_known(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    known = _known_under_a_pattern(cluster, key_of="node0")
    ssh = ["ssh", "-F", str(cluster.ssh_config), "node0", "true"]  # StrictHostKeyChecking yes
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, cluster=cluster)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert cluster.known_hosts.read_text() == known  # nothing recorded beside it


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_another_key_under_a_pattern_line_is_a_changed_key(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """node1's key under a pattern for node0: ssh refuses it as changed even under
    accept-new, and so does clusterlaunch (paramiko had recorded node0's key beside it)."""
    cluster = sim_cluster_factory(2)
    known = _known_under_a_pattern(cluster, key_of="node1")
    ssh = ["ssh", "-F", str(cluster.ssh_config), "-o", "StrictHostKeyChecking=accept-new"]
    by_ssh = subprocess.run([*ssh, "node0", "true"], capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    policy = ("--host-key-policy", "accept-new")
    result = exec_echo_hi(client, hosts, *policy, cluster=cluster)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "HOST KEY CHANGED" in result.stderr and result.stdout == ""
    assert f" in {cluster.known_hosts}:1, offered " in result.stderr  # the line, as ssh says
    assert cluster.known_hosts.read_text() == known


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_host_s_key_below_an_older_line_for_it_is_its_key(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """node1's key under a pattern for node0, then node0's own line: ssh accepts the key
    on any line that names the host; paramiko had compared the first line's alone."""
    cluster = sim_cluster_factory(2)
    own = cluster.known_hosts.read_text().splitlines()[0]  # node0's line
    known = _known_under_a_pattern(cluster, key_of="node1") + own + "\n"
    cluster.known_hosts.write_text(known)
    ssh = ["ssh", "-F", str(cluster.ssh_config), "node0", "true"]  # StrictHostKeyChecking yes
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, cluster=cluster)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[node0] hi"
    assert cluster.known_hosts.read_text() == known


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_hash_known_hosts_records_a_hashed_name_that_ssh_then_knows(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """HashKnownHosts yes: ssh records ``|1|salt|hash``, never the name (paramiko wrote
    the name in the clear); the key recorded is one ssh itself then finds."""
    cluster = sim_cluster_factory(1)
    known = tmp_path / "known_hosts"
    text = re.sub(
        r"(?m)^\s*UserKnownHostsFile .*$",
        f"    UserKnownHostsFile {known}\n    HashKnownHosts yes",
        cluster.ssh_config.read_text(),
    )
    config = tmp_path / "ssh_config"
    config.write_text(text)
    name = f"[{cluster.host('node0').addr}]:{cluster.host('node0').port}"
    ssh = ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=accept-new", "node0", "true"]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
    assert by_ssh.returncode == 0, by_ssh.stderr  # ssh itself: the ground truth
    assert known.read_text().startswith("|1|") and name not in known.read_text()
    known.write_text("")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    policy = ("--host-key-policy", "accept-new")
    result = exec_echo_hi(client, hosts, *policy, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = known.read_text()
    assert recorded.startswith("|1|") and name not in recorded, recorded
    strict = ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes", "node0", "true"]
    again = subprocess.run(strict, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr  # ssh finds the key clusterlaunch recorded


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_accept_new_into_a_missing_folder_records_nothing_as_ssh(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """ssh makes no folder for a UserKnownHostsFile (only ~/.ssh): it accepts the new key
    for the connection and records nothing. paramiko's client made the folder."""
    cluster = sim_cluster_factory(1)
    known = tmp_path / "nodir" / "known_hosts"
    text = re.sub(r"(?m)^\s*UserKnownHostsFile .*$", f"    UserKnownHostsFile {known}",
                  cluster.ssh_config.read_text())  # fmt: skip
    config = tmp_path / "ssh_config"
    config.write_text(text.replace("StrictHostKeyChecking yes", "StrictHostKeyChecking accept-new"))
    assert "StrictHostKeyChecking accept-new" in config.read_text()
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "echo", "hi"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert by_ssh.stdout == "hi\n" and not known.parent.exists(), by_ssh.stderr  # ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"
    assert not known.parent.exists()
