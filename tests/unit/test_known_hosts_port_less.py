"""Port-less known_hosts lines for a host off port 22, as ssh reads them (unit level; real
sshd and ssh as the ground truth: tests/cluster/test_known_hosts_without_port.py)."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import paramiko
import pytest

from clusterlaunch.core.errors import HostKeyError, UsageError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import hostkeypolicy, hostkeys, sshcompat

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIN5gnNP1GyQRzR8XWXyP1PtVCGbTHozmWflzzbv9VwPC"
OTHER = "AAAAC3NzaC1lZDI1NTE5AAAAIIE/a004wTsg8donyQKPG1vPg76+vXpf3Mq9rQCiPBad"


def _key(blob: str) -> paramiko.PKey:
    return paramiko.Ed25519Key(data=base64.b64decode(blob))


def _client(tmp_path: Path, text: str) -> paramiko.SSHClient:
    """A client whose known keys are ``text``, as sshconnect gives them."""
    (tmp_path / "known_hosts").write_text(text)
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(tmp_path / "known_hosts"))
    client = paramiko.SSHClient()
    client._system_host_keys = keys  # type: ignore[attr-defined]
    return client


def test_the_names_ssh_looks_a_host_up_by() -> None:
    assert hostkeys.lookup_names(SshTarget("n0", "MiXeD.Example", 22)) == ("mixed.example",)
    assert hostkeys.lookup_names(SshTarget("n0", "10.0.0.1", 2222)) == (
        "[10.0.0.1]:2222",
        "10.0.0.1",
    )


@pytest.mark.parametrize("name", ["10.0.0.1", "10.0.0.*", "HASHED"])
def test_the_key_on_a_port_less_line_is_accepted_under_both_policies(
    tmp_path: Path, name: str
) -> None:
    name = paramiko.HostKeys.hash_host("10.0.0.1") if name == "HASHED" else name
    client = _client(tmp_path, f"{name} ssh-ed25519 {KEY}\n")
    before = (tmp_path / "known_hosts").read_text()
    hostkeypolicy.StrictPolicy("StrictHostKeyChecking yes").missing_host_key(
        client, "[10.0.0.1]:2222", _key(KEY)
    )
    accept = hostkeypolicy.AcceptNewPolicy(str(tmp_path / "known_hosts"), threading.Lock())
    accept.missing_host_key(client, "[10.0.0.1]:2222", _key(KEY))
    assert (tmp_path / "known_hosts").read_text() == before  # nothing recorded, as by ssh


def test_another_key_on_a_port_less_line_is_unknown_not_changed(tmp_path: Path) -> None:
    client = _client(tmp_path, f"10.0.0.1 ssh-ed25519 {OTHER}\n")
    with pytest.raises(HostKeyError, match="unknown host key"):
        hostkeypolicy.StrictPolicy("x").missing_host_key(client, "[10.0.0.1]:2222", _key(KEY))
    accept = hostkeypolicy.AcceptNewPolicy(str(tmp_path / "known_hosts"), threading.Lock())
    accept.missing_host_key(client, "[10.0.0.1]:2222", _key(KEY))
    assert (tmp_path / "known_hosts").read_text().splitlines()[-1] == (
        f"[10.0.0.1]:2222 ssh-ed25519 {KEY}"
    )


def test_on_port_22_there_is_nothing_more_to_look_up(tmp_path: Path) -> None:
    client = _client(tmp_path, f"[10.0.0.1]:2222 ssh-ed25519 {KEY}\n")
    with pytest.raises(HostKeyError, match="unknown host key"):
        hostkeypolicy.StrictPolicy("x").missing_host_key(client, "10.0.0.1", _key(KEY))


@pytest.mark.parametrize("port", [2222, 22])
def test_a_port_less_revoked_line_is_refused_by_name(tmp_path: Path, port: int) -> None:
    """ssh reads port-less lines off port 22 too, @revoked ones included (it refuses the key
    they hold); paramiko cannot check revoked keys, so the host is refused by name."""
    (tmp_path / "known_hosts").write_text(
        f"@revoked 10.0.0.1 ssh-ed25519 {KEY}\n10.0.0.1 ssh-ed25519 {KEY}\n"
    )
    target = SshTarget("n0", "10.0.0.1", port, known_hosts_files=(str(tmp_path / "known_hosts"),))
    (tmp_path / "config").write_text("")
    with pytest.raises(UsageError, match=r"known_hosts:1: @revoked 10\.0\.0\.1: paramiko"):
        sshcompat.check_paramiko_can_connect(
            [target], str(tmp_path / "config"), hostkeys.KnownHosts()
        )


def test_a_port_less_cert_authority_counts_a_port_less_plain_key(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").write_text(f"@cert-authority 10.0.0.1 ssh-ed25519 {KEY}\n")
    target = SshTarget("n0", "10.0.0.1", 2222, known_hosts_files=(str(tmp_path / "known_hosts"),))
    (tmp_path / "config").write_text("")
    check = sshcompat.check_paramiko_can_connect
    with pytest.raises(UsageError, match=r"@cert-authority 10\.0\.0\.1: paramiko cannot check"):
        check([target], str(tmp_path / "config"), hostkeys.KnownHosts())
    with (tmp_path / "known_hosts").open("a") as known:
        known.write(f"10.0.0.1 ssh-ed25519 {KEY}\n")
    check([target], str(tmp_path / "config"), hostkeys.KnownHosts())  # the plain key: checked
