"""The system-wide /etc/ssh/ssh_config against real sshd hosts, for both SSH clients.

Plain ``ssh node0`` reads ``~/.ssh/config`` and then /etc/ssh/ssh_config; sites
define hosts, jump hosts and known_hosts files there. clusterlaunch read only the
user's file (and gave the OpenSSH client ``-F`` with it): a host the system file
defines was planned with its alias as its address. Reading that file as Debian and
Ubuntu ship it (``GSSAPIAuthentication yes`` for every host) must not refuse the
paramiko client unless a Kerberos ticket is held. Each test runs ssh and the CLI in
a mount namespace where /etc/ssh and ssh's home are the test's (tests/mountns.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests import kdc, mountns
from tests.cluster.support import exec_echo_hi, run_cli, write_hosts

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(mountns.why_not() is not None, reason=mountns.why_not() or ""),
]

DEBIAN = (
    "Include /etc/ssh/ssh_config.d/*.conf\n"
    "Host *\n    SendEnv LANG LC_*\n    HashKnownHosts yes\n    GSSAPIAuthentication yes\n"
)
"""Debian 12's /etc/ssh/ssh_config without its comments."""

_ALGORITHMS = (
    "ecdsa-sha2-nistp256,ecdsa-sha2-nistp256-cert-v01@openssh.com,ecdsa-sha2-nistp384,"
    "ecdsa-sha2-nistp384-cert-v01@openssh.com,ecdsa-sha2-nistp521,"
    "ecdsa-sha2-nistp521-cert-v01@openssh.com,sk-ecdsa-sha2-nistp256@openssh.com,"
    "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com,ssh-ed25519,ssh-ed25519-cert-v01@openssh.com,"
    "sk-ssh-ed25519@openssh.com,sk-ssh-ed25519-cert-v01@openssh.com,rsa-sha2-256,"
    "rsa-sha2-256-cert-v01@openssh.com,rsa-sha2-512,rsa-sha2-512-cert-v01@openssh.com"
)
FEDORA = {
    "ssh_config": "Include /etc/ssh/ssh_config.d/*.conf\n",
    "ssh_config.d/50-redhat.conf": (
        "Match final all\n"
        "    Include /etc/ssh/crypto-policies.config\n"
        "    GSSAPIAuthentication yes\n"
        "    ForwardX11Trusted yes\n"
        "    SendEnv LANG LC_CTYPE LC_NUMERIC LC_TIME LC_COLLATE LC_MONETARY LC_MESSAGES\n"
        "    SendEnv XMODIFIERS\n"
    ),
    # /etc/crypto-policies/back-ends/openssh.config (policy DEFAULT), moved under
    # /etc/ssh: a mount namespace can only mount over what exists.
    "crypto-policies.config": (
        "Ciphers aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes256-ctr,"
        "aes128-gcm@openssh.com,aes128-ctr\n"
        "MACs hmac-sha2-256-etm@openssh.com,hmac-sha1-etm@openssh.com,"
        "umac-128-etm@openssh.com,hmac-sha2-512-etm@openssh.com,hmac-sha2-256,hmac-sha1,"
        "umac-128@openssh.com,hmac-sha2-512\n"
        "GSSAPIKexAlgorithms gss-curve25519-sha256-,gss-nistp256-sha256-,"
        "gss-group14-sha256-,gss-group16-sha512-\n"
        "KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,"
        "ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group-exchange-sha256,"
        "diffie-hellman-group14-sha256,diffie-hellman-group16-sha512,"
        "diffie-hellman-group18-sha512\n"
        f"HostKeyAlgorithms {_ALGORITHMS}\n"
        f"PubkeyAcceptedAlgorithms {_ALGORITHMS}\n"
        "CASignatureAlgorithms ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,"
        "sk-ecdsa-sha2-nistp256@openssh.com,ssh-ed25519,sk-ssh-ed25519@openssh.com,"
        "rsa-sha2-256,rsa-sha2-512\n"
        "RequiredRSASize 2048\n"
    ),
}
"""Fedora's and RHEL 9's system files (their shape; what matters, verbatim)."""


def _system_with(cluster: LoopbackCluster, tmp_path: Path, system: str = "debian") -> list[str]:
    """A distribution's system config, the cluster's hosts in ssh_config.d, no user config."""
    cluster_conf = {"ssh_config.d/50-cluster.conf": cluster.ssh_config.read_text()}
    files = {"ssh_config": DEBIAN} if system == "debian" else FEDORA
    return mountns.ssh_dirs(tmp_path, {**files, **cluster_conf}, {})


def _by_ssh(prefix: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, "ssh", *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
@pytest.mark.parametrize("system", ["debian", "fedora"])
def test_hosts_defined_in_the_system_config_are_reached(
    sim_cluster_factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    system: str,
    client: str,
) -> None:
    """Also through ``--sync``: rsync's ssh gets no ``-F`` and reads the same files."""
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/no-ticket")
    cluster = sim_cluster_factory(2)
    prefix = _system_with(cluster, tmp_path, system)
    by_ssh = _by_ssh(prefix, "node0", "echo", "hi")
    assert by_ssh.returncode == 0 and by_ssh.stdout == "hi\n", by_ssh.stderr  # ground truth
    project = tmp_path / "project"
    project.mkdir()
    (project / "hello.txt").write_text("synced\n")
    dests = {host: tmp_path / f"dest-{host}" for host in ("node0", "node1")}
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [(h, 1, {"workdir": str(d)}) for h, d in dests.items()]
    )
    args = ("--ssh-client", client, "--sync", str(hosts), "--", "cat", "hello.txt")
    result = run_cli("exec", None, *args, cwd=project, prefix=prefix, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(result.stdout.splitlines()) == ["[node0] synced", "[node1] synced"]


@pytest.mark.skipif(kdc.why_no_kdc() is not None, reason=kdc.why_no_kdc() or "")
@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_held_ticket_refuses_the_paramiko_client_only(
    sim_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """With a ticket ssh would try Kerberos first; these servers do not offer it, so ssh
    (and the OpenSSH client) log in with keys, and the paramiko client refuses, naming
    the system file's line, before anything is contacted."""
    cluster = sim_cluster_factory(1)
    prefix = _system_with(cluster, tmp_path)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    with kdc.realm(tmp_path / "kdc") as realm:
        realm.kinit()
        for name in ("KRB5_CONFIG", "KRB5CCNAME"):
            monkeypatch.setenv(name, realm.env[name])
        tried = _by_ssh(prefix, "-v", "node0", "true")
        result = exec_echo_hi(client, hosts, prefix=prefix)
    assert tried.returncode == 0, tried.stderr
    assert "Authenticated to 127.0.0.11" in tried.stderr and 'using "publickey"' in tried.stderr
    if client == "openssh":
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout == "[node0] hi\n"
        return
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout == ""
    assert result.stderr.strip().splitlines()[-1] == (
        "clusterlaunch: error: node0: /etc/ssh/ssh_config:5: GSSAPIAuthentication yes and "
        "you hold a Kerberos ticket (klist -s): ssh would log in with Kerberos; paramiko "
        "does not do GSSAPI here; use --ssh-client openssh"
    )


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_ssh_config_flag_reads_that_file_alone(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    """``--ssh-config FILE`` is ``ssh -F FILE``: a system file that breaks every host is
    not read (the OpenSSH client is given ``-F``; the paramiko client reads FILE alone)."""
    cluster = sim_cluster_factory(1)
    system = {"ssh_config": "Host *\n    ProxyCommand /bin/false\n    User nobody\n"}
    prefix = mountns.ssh_dirs(tmp_path, system, {})
    assert _by_ssh(prefix, "node0", "true").returncode == 255  # the system file breaks it
    by_ssh = _by_ssh(prefix, "-F", str(cluster.ssh_config), "node0", "true")
    assert by_ssh.returncode == 0, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi(client, hosts, cluster=cluster, prefix=prefix)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"
