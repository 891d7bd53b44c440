"""Kerberos logins against real sshd (GSSAPIAuthentication) with a real MIT KDC.

The docs say ``--ssh-client openssh`` does whatever ``ssh HOST`` does, Kerberos
included, and that the paramiko client refuses ``GSSAPIAuthentication yes`` while a
ticket is held, because ssh would then log in with it. Here the hosts accept
Kerberos, the client has no key at all, and ``ssh -v`` says how it logged in.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests import kdc
from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(kdc.why_no_kdc() is not None, reason=kdc.why_no_kdc() or ""),
]


@pytest.fixture
def kerberized(
    sim_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[SshVariantCluster, kdc.Realm, Path]]:
    """A 1-host cluster whose sshd takes Kerberos logins, a realm with a ticket, and a
    config that offers no key (only Kerberos can log in)."""
    with kdc.realm(tmp_path / "kdc") as realm:
        keytab = tmp_path / "host.keytab"
        realm.host_keytab("127.0.0.11", keytab)
        for name in ("KRB5_CONFIG", "KRB5CCNAME"):
            monkeypatch.setenv(name, realm.env[name])
        monkeypatch.setenv("KRB5_KTNAME", f"FILE:{keytab}")  # sshd's, when it starts
        cluster = sim_cluster_factory(1, cls=SshVariantCluster, gssapi=True)
        text = re.sub(
            r"(?m)^\s*(IdentityFile|IdentitiesOnly) .*\n", "", cluster.ssh_config.read_text()
        )
        keyless = f"    IdentityFile {tmp_path}/no_key\n    IdentitiesOnly yes\n"
        text = text.replace("    UserKnownHostsFile", keyless + "    UserKnownHostsFile", 1)
        config = tmp_path / "ssh_config"
        config.write_text("Host *\n    GSSAPIAuthentication yes\n" + text)
        realm.kinit()
        yield cluster, realm, config


def test_the_openssh_client_logs_in_with_a_ticket_as_ssh_does(
    kerberized: tuple[SshVariantCluster, kdc.Realm, Path], tmp_path: Path
) -> None:
    _, realm, config = kerberized
    by_ssh = subprocess.run(
        ["ssh", "-v", "-F", str(config), "node0", "echo", "hi"], capture_output=True, text=True
    )
    assert by_ssh.returncode == 0, by_ssh.stderr
    assert 'using "gssapi-with-mic"' in by_ssh.stderr  # the ground truth: Kerberos, no key
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi("openssh", hosts, config=config)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] hi\n"
    realm.kdestroy()  # no ticket: neither ssh nor the client can log in
    again = exec_echo_hi("openssh", hosts, config=config)
    assert again.returncode != 0 and "Permission denied" in again.stderr


def test_the_paramiko_client_refuses_where_ssh_would_use_the_ticket(
    kerberized: tuple[SshVariantCluster, kdc.Realm, Path], tmp_path: Path
) -> None:
    _, realm, config = kerberized
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi("paramiko", hosts, config=config)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        f"clusterlaunch: error: node0: {config}:2: GSSAPIAuthentication yes and you hold a "
        "Kerberos ticket (klist -s): ssh would log in with Kerberos; paramiko does not do "
        "GSSAPI here; use --ssh-client openssh"
    )
    realm.kdestroy()  # no ticket: ssh would fall back to keys (none here), as paramiko does
    again = exec_echo_hi("paramiko", hosts, config=config)
    assert again.returncode != 0 and "no key to offer" in again.stderr
