"""The indexed SSH config lookup gives paramiko's answers, without its O(blocks) per host."""

from __future__ import annotations

import getpass
from unittest import mock

import paramiko
import pytest

from clusterlaunch.transport import sshlookup
from clusterlaunch.transport.hostnames import host_line_matches
from clusterlaunch.transport.sshlookup import IndexedSshConfig

CONFIG = """
User everyone
Host node1 node2
    HostName 10.0.0.1
    Port 2201
Host node2
    HostName ignored-first-wins
    IdentityFile ~/.ssh/second
Host node*
    Port 2299
    IdentityFile ~/.ssh/nodes
Host !node3 gpu?
    User gpuuser
Match originalhost node3
    User matched
Host node3
    ProxyJump bastion
Host node4
    IdentityFile ~/.ssh/id_%h /keys/~odd %d/k
    ControlPath ~/.ssh/cm-%C-%l
    HostName %h.example.org
Host gpu1
    ProxyCommand ssh -W %h:%p ~/jump
    HostName ~literal
Host *
    IdentityFile ~/.ssh/all
    ConnectTimeout 7
"""

NAMES = ["node1", "node2", "node3", "node4", "gpu1", "gpu12", "other", "NODE1", "node1 "]
# node4 and gpu1: values with tokens, with "~" only, and with "~" inside


@pytest.mark.parametrize("name", NAMES)
def test_lookup_equals_paramiko(name: str) -> None:
    expected = _paramiko_lookup(CONFIG, name)
    found = IndexedSshConfig.from_text(CONFIG).lookup(name)
    if "controlpath" in expected:  # left as written: see the next test
        assert found.pop("controlpath") == "~/.ssh/cm-%C-%l" != expected.pop("controlpath")
    assert found == expected


def _paramiko_lookup(text: str, name: str) -> dict[str, object]:
    """paramiko's lookup, IdentityFile and ProxyCommand left as written (sshtokens expands
    them as ssh does: paramiko made ``ssh -W %h:%p ~/jump`` with ``HostName ~literal`` into
    ``ssh -W /rootliteral:22 /root/jump``)."""
    tokenize = paramiko.SSHConfig._tokenize

    def as_written(config: paramiko.SSHConfig, *args: str) -> str:
        key, value = args[-2:]
        if key in ("identityfile", "proxycommand"):
            return value
        return tokenize(config, *args)  # type: ignore[arg-type]

    with mock.patch.object(paramiko.SSHConfig, "_tokenize", as_written):
        return dict(paramiko.SSHConfig.from_text(text).lookup(name))


def test_control_path_is_left_as_written_without_a_dns_lookup() -> None:
    # Never used (ssh gets clusterlaunch's own, paramiko multiplexes nothing); paramiko
    # resolved the local DNS name per host to expand it.
    config = IndexedSshConfig.from_text("Host *\n    ControlPath ~/.ssh/cm-%r@%h:%p\n")
    with mock.patch("socket.getfqdn", side_effect=AssertionError("a DNS look-up")):
        assert config.lookup("h1")["controlpath"] == "~/.ssh/cm-%r@%h:%p"


def test_one_block_per_host_needs_no_user_lookup_per_block() -> None:
    text = "".join(f"Host h{i}\n    HostName 10.1.{i // 250}.{i % 250}\n" for i in range(300))
    config = IndexedSshConfig.from_text(text + "Host *\n    Port 2222\n")
    with mock.patch.object(getpass, "getuser", wraps=getpass.getuser) as getuser:
        found = [config.lookup(f"h{i}") for i in range(300)]
    assert found[123]["hostname"] == "10.1.0.123" and found[299]["port"] == "2222"
    # Not once per block and pass (2 x 301 per host), nor once per value that could
    # hold a token: no value has one.
    assert getuser.call_count == 0


def test_values_without_tokens_need_no_user_host_or_dns_lookup() -> None:
    text = "".join(f"Host h{i}\n    HostName 10.2.0.{i}\n" for i in range(32))
    text += "Host *\n    User u\n    IdentityFile ~/.ssh/id_ed25519\n    ControlPath /run/cm\n"
    config = IndexedSshConfig.from_text(text)
    with (
        mock.patch("socket.getfqdn", side_effect=AssertionError("a DNS look-up")),
        mock.patch("socket.gethostname", side_effect=AssertionError("a host-name look-up")),
        mock.patch.object(getpass, "getuser", side_effect=AssertionError("a user look-up")),
    ):
        found = [config.lookup(f"h{i}") for i in range(32)]
    assert found[5]["identityfile"] == ["~/.ssh/id_ed25519"]  # as written: see sshtokens
    assert found[5]["controlpath"] == "/run/cm" and found[5]["hostname"] == "10.2.0.5"


def test_identity_files_are_left_as_written_without_any_look_up() -> None:
    """paramiko resolved the local DNS name for ``IdentityFile ~/.ssh/id_%h`` on every host
    (a reverse look-up each: on a login node, a DNS query each); sshtokens expands them."""
    text = "Host *\n    IdentityFile ~/.ssh/id_%h\n    IdentityFile %d/k_%r_%u_%l\n    User u\n"
    config = IndexedSshConfig.from_text(text)
    with (
        mock.patch("socket.getfqdn", side_effect=AssertionError("a DNS look-up")),
        mock.patch("socket.gethostname", side_effect=AssertionError("a host-name look-up")),
        mock.patch.object(getpass, "getuser", side_effect=AssertionError("a user look-up")),
    ):
        found = {name: config.lookup(name) for name in ("h1", "h2")}
    assert found["h2"]["identityfile"] == ["~/.ssh/id_%h", "%d/k_%r_%u_%l"]


def test_canonicalizing_config_is_looked_up_the_plain_way() -> None:
    text = "Host a\n    CanonicalizeHostname no\n    Port 1\nHost *\n    User u\n"
    assert IndexedSshConfig.from_text(text).lookup("a") == paramiko.SSHConfig.from_text(
        text
    ).lookup("a")


def test_empty_config() -> None:
    assert IndexedSshConfig().lookup("x") == paramiko.SSHConfig().lookup("x")


def test_literal_names_are_compared_not_compiled() -> None:
    # A wildcard is a regular expression compiled (and cached) per pattern: one per host here.
    text = "".join(f"Host h{i} alias{i}\n    Port {1000 + i}\n" for i in range(50))
    text += "Host h*\n    User nodes\n"
    config = IndexedSshConfig.from_text(text)
    plain = paramiko.SSHConfig.from_text(text)
    with mock.patch.object(sshlookup, "host_line_matches", wraps=host_line_matches) as matched:
        found = {name: config.lookup(name) for name in ("h7", "alias7", "h49", "h50", "H7")}
    assert found == {name: plain.lookup(name) for name in found}
    assert found["h7"]["port"] == "1007" and found["alias7"]["port"] == "1007"
    assert "user" not in found["alias7"] and found["h50"]["user"] == "nodes"
    # Only a line with a wildcard is matched as patterns: "h*", and "*", the block paramiko
    # makes of the lines above the first Host.
    assert {tuple(call.args[0]) for call in matched.call_args_list} == {("h*",), ("*",)}
