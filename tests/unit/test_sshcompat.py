"""What the paramiko client refuses, by name (known_hosts markers, settings, keys), and
the OpenSSH client's failures read alike; known_hosts names and patterns: test_known_hosts.py."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.core.sshargv import Keepalive, Mux, ssh_argv
from clusterlaunch.transport import hostkeys, sshcompat, sshconfig, sshfailure

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIN5gnNP1GyQRzR8XWXyP1PtVCGbTHozmWflzzbv9VwPC"


def _target(tmp_path: Path, host: str = "10.0.0.1", port: int = 22, **kw: object) -> SshTarget:
    return SshTarget(
        alias="n0",
        hostname=host,
        port=port,
        known_hosts_files=(str(tmp_path / "known_hosts"),),
        **kw,  # type: ignore[arg-type]
    )


def _check(tmp_path: Path, target: SshTarget, config: str = "") -> None:
    path = tmp_path / "config"
    path.write_text(config)
    sshcompat.check_paramiko_can_connect([target], str(path), hostkeys.KnownHosts())


def test_marker_lines_are_kept_aside_not_fatal(tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(
        f"@cert-authority *.example.org ssh-ed25519 {KEY}\n"
        "garbage line\n"
        f"10.0.0.1 ssh-ed25519 {KEY}\n"
        f"@revoked 10.9.9.9 ssh-ed25519 {KEY}\n"
    )
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(known))  # paramiko's own load raised InvalidHostKey here
    assert keys.lookup("10.0.0.1") is not None
    assert [(m.kind, m.where) for m in keys.markers] == [
        ("@cert-authority", f"{known}:1"),
        ("@revoked", f"{known}:4"),
    ]
    _check(tmp_path, _target(tmp_path))  # neither marker is about 10.0.0.1


def test_a_matching_cert_authority_is_refused_unless_a_plain_key_is_known(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"@cert-authority [10.0.0.*]:2222 ssh-ed25519 {KEY}\n")
    target = _target(tmp_path, port=2222)
    with pytest.raises(UsageError) as refused:
        _check(tmp_path, target)
    assert str(refused.value) == (
        f"n0: {tmp_path}/known_hosts:1: @cert-authority [10.0.0.*]:2222: paramiko cannot "
        "check host certificates; use --ssh-client openssh"
    )
    with (tmp_path / "known_hosts").open("a") as known:
        known.write(f"[10.0.0.1]:2222 ssh-ed25519 {KEY}\n")
    _check(tmp_path, target)  # paramiko checks the plain key, as ssh would


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("Host n0\n    CertificateFile /c-cert.pub\n", ":2: CertificateFile /c-cert.pub"),
        ("Host n*\n  HostKeyAlias other\n", ":2: HostKeyAlias other"),
        ('Match exec "true"\n  Port 2\n', ":1: Match exec"),
        ("Host n0\n  Ciphers chacha20-poly1305@openssh.com\n", ":2: Ciphers chacha20-poly1305@"),
        ("Host *\n  MACs umac-128-etm@openssh.com\n", ":2: MACs umac-128-etm@openssh.com"),
        ("Host *\n  KexAlgorithms sntrup761x25519-sha512\n", ":2: KexAlgorithms sntrup761"),
        ("Host *\n  UserKnownHostsFile /kh /kh_%j\n", ":2: UserKnownHostsFile /kh_%j: %j is"),
        ("Host *\n  RevokedHostKeys /etc/ssh/revoked\n", ":2: RevokedHostKeys /etc/ssh/revoked"),
        ("Host n0\n  KnownHostsCommand /bin/kh %H\n", ":2: KnownHostsCommand /bin/kh %H"),
        ("Host *\n  BindAddress 10.0.0.5\n", ":2: BindAddress 10.0.0.5: paramiko's"),
        ("Host *\n  BindInterface ib0\n", ":2: BindInterface ib0: paramiko's"),
        ("Host *\n  CheckHostIP yes\n", ":2: CheckHostIP yes: paramiko does not check"),
        ("Host *\n  ForwardAgent ~/.other/agent.sock\n", ":2: ForwardAgent ~/.other/agent.sock"),
        ("Host *\n  HostbasedAuthentication yes\n", ":2: HostbasedAuthentication yes: ssh"),
        ("Host n0\n  PubkeyAuthentication no\n", ":2: PubkeyAuthentication no: ssh offers"),
        ("Host *\n  PreferredAuthentications password\n", ":2: PreferredAuthentications"),
        ("Host n0\n  VerifyHostKeyDNS ask\n", ":2: VerifyHostKeyDNS ask: paramiko cannot"),
        ("Host *\n  PubkeyAcceptedAlgorithms sk-ssh-ed25519@openssh.com\n", ":2: PubkeyAccepted"),
        ("Host *\n  IdentityAgent ~/.1password/agent.sock\n", ":2: IdentityAgent ~/.1password"),
        ("Host *\n  IdentityAgent /run/a_%j\n", ":2: IdentityAgent /run/a_%j: %j is"),
        ("Host *\n  ProxyUseFdpass yes\n", ":2: ProxyUseFdpass yes: ssh takes a connected"),
        # Criteria of OpenSSH 9.4+: paramiko applied their blocks to every host.
        ("Match localnetwork 10.0.0.0/8\n  Port 2\n", ":1: Match localnetwork: paramiko"),
        ("Host n0\nMatch final !tagged x\n  Port 2\n", ":2: Match tagged: paramiko cannot"),
        ('Match final exec "true"\n  Port 2\n', ":1: Match exec: paramiko cannot evaluate"),
        ("CanonicalizePermittedCNAMEs *.a:*.b\n", ":1: CanonicalizePermittedCNAMEs: paramiko"),
        # Read differently by OpenSSH versions: the local ssh -G resolves them.
        ("Match !final\n  Port 2\n", ":1: Match !final (OpenSSH before 10.1 reads the config"),
        (
            "CanonicalizeHostname yes\nHost n0\n  ProxyJump none\n",
            ":3: ProxyJump none under CanonicalizeHostname yes (OpenSSH before 9.4",
        ),
    ],
)
def test_settings_paramiko_cannot_honour_are_named(
    tmp_path: Path, config: str, expected: str
) -> None:
    with pytest.raises(UsageError, match="use --ssh-client openssh") as refused:
        _check(tmp_path, _target(tmp_path), config)
    assert f"{tmp_path}/config{expected}" in str(refused.value)


@pytest.mark.parametrize("given", [True, False])
def test_the_hosts_file_user_is_the_one_match_user_sees_here_too(
    tmp_path: Path, given: bool
) -> None:
    """The check reads the blocks the connection reads: ``user:`` is ssh's ``-l``."""
    target = _target(tmp_path, user="alice", given=("user",) if given else ())
    config = "Match user alice\n  CertificateFile /keys/alice-cert.pub\n"
    if not given:  # the local user's blocks: nothing to refuse
        _check(tmp_path, target, config)
        return
    with pytest.raises(UsageError, match=":2: CertificateFile"):
        _check(tmp_path, target, config)


def test_a_jump_host_needing_a_certificate_is_named(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"@cert-authority bastion ssh-ed25519 {KEY}\n")
    target = _target(tmp_path, proxy_jump="bastion")
    config = f"Host bastion\n    UserKnownHostsFile {tmp_path}/known_hosts\n"
    with pytest.raises(UsageError, match=r"^n0: jump host bastion: .*:1: @cert-authority"):
        _check(tmp_path, target, config)


def test_a_fido_identity_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "id_sk"
    key.write_text("private")
    key.with_name("id_sk.pub").write_text(f"sk-ssh-ed25519@openssh.com {KEY} me\n")
    with pytest.raises(UsageError, match="paramiko cannot use FIDO keys"):
        _check(tmp_path, _target(tmp_path, identity_files=(str(key),)))


def test_an_identity_file_ssh_names_otherwise_by_version_is_refused(tmp_path: Path) -> None:
    """%C with a ProxyJump hashes the jump as this ssh's version does; paramiko cannot know."""
    target = _target(tmp_path, proxy_jump="bastion")
    config = "Host n0\n    ProxyJump bastion\n    IdentityFile ~/.ssh/k_%C\n"
    with pytest.raises(UsageError) as refused:
        _check(tmp_path, target, config)
    assert str(refused.value) == (
        f"n0: {tmp_path}/config:3: IdentityFile ~/.ssh/k_%C: %C with ProxyJump bastion "
        "differs between OpenSSH versions; use --ssh-client openssh"
    )
    _check(tmp_path, _target(tmp_path), "Host n0\n    IdentityFile ~/.ssh/k_%C\n")  # no jump


def test_key_type_read_from_an_openssh_private_key(tmp_path: Path) -> None:
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    key.with_name("id.pub").unlink()
    assert sshcompat.key_type(str(key)) == "ssh-ed25519"


@pytest.mark.parametrize(
    ("said", "expected", "kind"),
    [
        ("ssh: connect to host 10.0.0.1 port 22: Connection refused", "connection refused by", ""),
        ("kex_exchange_identification: read: Connection reset by peer", "no SSH handshake", "t"),
        ("Connection timed out during banner exchange", "no SSH handshake", ""),
        ("ssh: Could not resolve hostname nope: Name or service not known", "cannot resolve", ""),
        ("root@10.0.0.1: Permission denied (publickey).", "authentication failed for", ""),
        ("No ED25519 host key is known for x.\nHost key verification failed.", "unknown host", "k"),
    ],
)
def test_openssh_failures_read_like_paramiko_ones(
    tmp_path: Path, said: str, expected: str, kind: str
) -> None:
    failure = sshfailure.classify(_target(tmp_path), said, None)
    assert failure.detail.startswith(expected)
    assert isinstance(failure, sshfailure.Transient) == (kind == "t")
    assert failure.host_key == (kind == "k")


def test_changed_key_names_the_offending_line(tmp_path: Path) -> None:
    said = (
        "@@@@@\nWARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!\n"
        "The fingerprint for the ED25519 key sent by the remote host is\nSHA256:abc+/=.\n"
        "Offending ED25519 key in /kh:3\nHost key verification failed.\n"
    )
    detail = sshfailure.classify(_target(tmp_path, port=2200), said, None).detail
    assert detail.startswith("HOST KEY CHANGED (known in /kh:3, offered SHA256:abc+/=)")
    assert "ssh-keygen -R '[10.0.0.1]:2200' -f /kh" in detail


def test_master_and_session_argv() -> None:
    target = SshTarget(alias="n0", hostname="10.0.0.1", proxy_jump="b")
    master = ssh_argv(
        target,
        config_file="/c",
        strict=True,
        connect_timeout=5,
        mux=Mux("/run/d/0", master=True),
        keepalive=Keepalive(1, 6),
    )
    assert master[master.index("ProxyJump=b") - 1] == "-o"
    assert master[11:15] == ["-o", "ServerAliveInterval=1", "-o", "ServerAliveCountMax=6"]
    assert "ControlMaster=yes" in master and "ControlPersist=no" in master
    assert "ControlPath=/run/d/0" in master and "StrictHostKeyChecking=yes" in master
    session = ssh_argv(
        target, config_file="/c", strict=False, connect_timeout=5, mux=Mux("/d 1"),
        proxy_command="ssh -W %h:%p -- b",
    )  # fmt: skip
    assert "ControlMaster=no" in session and 'ControlPath="/d 1"' in session
    assert "ProxyCommand=ssh -W %h:%p -- b" in session and "ProxyJump=b" not in session
    assert "StrictHostKeyChecking=accept-new" in session and "BatchMode=yes" in session
    with pytest.raises(UsageError, match="cannot contain '%'"):
        ssh_argv(target, config_file="/c", strict=True, connect_timeout=5, mux=Mux("/d%h"))


@pytest.mark.parametrize(
    "agent",
    ["none", "SSH_AUTH_SOCK", "${SSH_AUTH_SOCK}", "$SSH_AUTH_SOCK", "$SAME_AGENT", "/run/agent.%u"],
)
def test_an_identity_agent_paramiko_can_ask_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    monkeypatch.setenv("SSH_AUTH_SOCK", f"/run/agent.{pwd.getpwuid(os.getuid()).pw_name}")
    monkeypatch.setenv("SAME_AGENT", os.environ["SSH_AUTH_SOCK"])  # ssh's "$NAME" form
    _check(tmp_path, _target(tmp_path), f"Host *\n  IdentityAgent {agent}\n")
    target = sshconfig.resolve_targets(str(tmp_path / "config"), [HostSpec("n0", 1)])[0]
    assert target.use_agent is (agent != "none")  # IdentityAgent none: no agent asked


@pytest.mark.parametrize("agent", ["$OTHER_AGENT", "$UNSET_AGENT"])
def test_an_identity_agent_variable_naming_another_agent_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    """ssh asks the agent ``$NAME`` names, none when NAME is unset; paramiko's is
    ``$SSH_AUTH_SOCK``'s."""
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")
    monkeypatch.setenv("OTHER_AGENT", "/run/other.sock")
    monkeypatch.delenv("UNSET_AGENT", raising=False)
    with pytest.raises(UsageError, match=rf"IdentityAgent \{agent}: paramiko asks only"):
        _check(tmp_path, _target(tmp_path), f"Host *\n  IdentityAgent {agent}\n")


def test_settings_at_ssh_defaults_are_not_refused(tmp_path: Path) -> None:
    config = (
        "Host *\n  CheckHostIP no\n  VerifyHostKeyDNS no\n  GSSAPIAuthentication no\n"
        "  HostbasedAuthentication no\n  PubkeyAuthentication yes\n  ForwardAgent yes\n"
        "  PreferredAuthentications gssapi-with-mic,publickey,password\n  ProxyUseFdpass no\n"
    )
    _check(tmp_path, _target(tmp_path), config)


@pytest.mark.parametrize(
    ("configured", "origin", "fix"),
    [
        ("yes", "StrictHostKeyChecking yes in the SSH config", "--host-key-policy accept-new"),
        ("accept-new", "StrictHostKeyChecking accept-new in the SSH config", "UserKnownHostsFile"),
        (None, "the default, accept-new", "UserKnownHostsFile"),
    ],
)
def test_an_unknown_key_names_where_the_policy_came_from_and_a_fix_that_helps(
    configured: str | None, origin: str, fix: str
) -> None:
    """accept-new that still failed (UserKnownHostsFile none): ssh could not record the
    key, so "connect once with --host-key-policy accept-new" could not help."""
    target = SshTarget(alias="a", hostname="10.0.0.1", host_key_checking=configured)
    said = "No ED25519 host key is known for x and you have requested strict checking.\n"
    said += "Host key verification failed.\n"
    detail = sshfailure.classify(target, said, None).detail
    assert detail.startswith(f"unknown host key ({origin}): No ED25519 host key is known for x")
    assert "strict checking.;" not in detail and "strict checking;" in detail
    assert detail.endswith(fix)


def test_an_unset_variable_ssh_refuses_as_well_is_not_sent_to_openssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ssh-client openssh`` failed as well ("invalid environment variable expansion")."""
    monkeypatch.delenv("CL_TEST_UNSET", raising=False)
    config = "Host *\n  UserKnownHostsFile ${CL_TEST_UNSET}/kh\n"
    with pytest.raises(UsageError) as refused:
        _check(tmp_path, _target(tmp_path), config)
    assert str(refused.value).endswith(
        ": ${CL_TEST_UNSET} is not set; ssh refuses it too: set the variable or change the "
        "SSH config"
    )
    assert "--ssh-client" not in str(refused.value)
