"""GSSAPIAuthentication is refused by the paramiko client only while a Kerberos ticket is
held: without one ssh falls back to its keys as paramiko does, and Debian's and Ubuntu's
/etc/ssh/ssh_config set it for every host. A real MIT KDC of the test's own issues the
ticket; ``klist -s`` is the real one."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import hostkeys, kerberos, sshcompat
from tests import kdc

needs_kdc = pytest.mark.skipif(kdc.why_no_kdc() is not None, reason=kdc.why_no_kdc() or "")


@needs_kdc
def test_klist_decides_whether_a_ticket_is_held(tmp_path: Path) -> None:
    with kdc.realm(tmp_path / "kdc") as realm:
        assert kerberos.held_ticket(realm.env) is None
        realm.kinit()
        assert kerberos.held_ticket(realm.env) == "you hold a Kerberos ticket (klist -s)"
        realm.kdestroy()
        assert kerberos.held_ticket(realm.env) is None


def test_without_klist_a_file_cache_counts_and_other_kinds_cannot_be_ruled_out(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    cache = tmp_path / "cc"
    env = {"PATH": str(empty), "KRB5CCNAME": f"FILE:{cache}"}
    assert kerberos.held_ticket(env) is None
    cache.write_bytes(b"\x05\x04")
    assert kerberos.held_ticket(env) == (
        f"a Kerberos ticket cache exists ({cache}; no klist to check it)"
    )
    assert kerberos.held_ticket({**env, "KRB5CCNAME": str(cache)}) is not None  # no FILE:
    keyring = {**env, "KRB5CCNAME": "KEYRING:persistent:0"}
    assert kerberos.held_ticket(keyring) == (
        "KRB5CCNAME=KEYRING:persistent:0 may hold a Kerberos ticket (no klist to check it)"
    )


@needs_kdc
@pytest.mark.parametrize("keyword", ["GSSAPIAuthentication", "GSSAPIKeyExchange"])
def test_gssapi_is_refused_only_while_a_ticket_is_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyword: str
) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host *\n    SendEnv LANG\n    {keyword} yes\n")
    target = SshTarget(alias="n0", hostname="10.0.0.1", port=22)
    with kdc.realm(tmp_path / "kdc") as realm:
        for name in ("KRB5_CONFIG", "KRB5CCNAME"):
            monkeypatch.setenv(name, realm.env[name])
        sshcompat.check_paramiko_can_connect([target], str(config), hostkeys.KnownHosts())
        realm.kinit()
        with pytest.raises(UsageError) as refused:
            sshcompat.check_paramiko_can_connect([target], str(config), hostkeys.KnownHosts())
    assert str(refused.value) == (
        f"n0: {config}:3: {keyword} yes and you hold a Kerberos ticket (klist -s): ssh would "
        "log in with Kerberos; paramiko does not do GSSAPI here; use --ssh-client openssh"
    )
