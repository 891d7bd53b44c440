"""The SSH config's Ciphers, MACs and KexAlgorithms, read as ssh_config(5) says."""

from __future__ import annotations

import socket

import paramiko
import pytest

from clusterlaunch.core.model import SshTarget
from clusterlaunch.core.sshalgorithms import configured, preferred
from clusterlaunch.transport import sshoffer

HAS = ("aes128-gcm@openssh.com", "aes128-ctr", "aes256-ctr", "3des-cbc")
DEFAULTS = ("aes128-gcm@openssh.com", "aes128-ctr", "aes256-ctr")


@pytest.mark.parametrize(
    ("value", "offered"),
    [
        ("aes256-ctr,aes128-ctr", ("aes256-ctr", "aes128-ctr")),  # replaces, in its order
        ("chacha20-poly1305@openssh.com,aes256-ctr", ("aes256-ctr",)),  # what the client lacks
        ("chacha20-poly1305@openssh.com", ()),  # none: the caller refuses
        ("aes*-ctr", ("aes128-ctr", "aes256-ctr")),  # wildcards
        ("+3des-cbc", (*DEFAULTS, "3des-cbc")),  # appended to the defaults
        ("+aes128-ctr", DEFAULTS),  # already there: once
        ("-*-gcm@openssh.com", ("aes128-ctr", "aes256-ctr")),  # taken out
        ("^aes256-ctr", ("aes256-ctr", "aes128-gcm@openssh.com", "aes128-ctr")),  # put first
        ("AES256-CTR", ()),  # names are case-sensitive, as ssh's are
    ],
)
def test_lists_replace_append_remove_or_lead(value: str, offered: tuple[str, ...]) -> None:
    assert preferred(value, HAS, DEFAULTS) == offered


def test_curve25519_answers_to_both_of_its_names() -> None:
    has = ("mlkem768x25519-sha256", "curve25519-sha256@libssh.org", "ecdh-sha2-nistp256")
    assert preferred("curve25519-sha256", has, has) == ("curve25519-sha256@libssh.org",)
    assert preferred("curve25519-sha256@libssh.org", has, has) == ("curve25519-sha256@libssh.org",)
    assert preferred("-curve25519-sha256", has, has) == (has[0], has[2])


def test_only_the_lists_a_config_sets_are_read() -> None:
    found = {"ciphers": "aes256-ctr", "macs": "", "hostname": "10.0.0.1", "port": "22"}
    assert configured(found) == (("ciphers", "aes256-ctr"),)


def test_each_connection_offers_what_its_config_asks_for() -> None:
    """paramiko's own Transport, made by the factory the client uses (no server needed)."""
    target = SshTarget(
        alias="n0",
        hostname="10.0.0.1",
        algorithms=(
            ("macs", "-hmac-sha1*,hmac-md5*"),
            ("kexalgorithms", "curve25519-sha256"),
            ("hostkeyalgorithms", "ssh-ed25519-cert-v01@openssh.com,ssh-ed25519"),
        ),
    )
    near, far = socket.socketpair()
    with near, far:
        options = sshoffer.transport_factory(target)(near).get_security_options()
        assert options.ciphers[:2] == ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
        assert "aes128-ctr" in options.ciphers  # for a server without GCM
        assert not [mac for mac in options.digests if "sha1" in mac or "md5" in mac]
        assert options.kex == ("curve25519-sha256@libssh.org",)
        assert options.key_types == ("ssh-ed25519",)
        plain = sshoffer.transport_factory(SshTarget(alias="n1", hostname="h"))(far)
        assert plain.get_security_options().kex == paramiko.Transport._preferred_kex


def test_pubkey_accepted_algorithms_under_either_name() -> None:
    assert configured({"pubkeyacceptedkeytypes": "ssh-ed25519"}) == (
        ("pubkeyacceptedalgorithms", "ssh-ed25519"),
    )
    both = {"pubkeyacceptedalgorithms": "rsa-sha2-512", "pubkeyacceptedkeytypes": "ssh-ed25519"}
    assert configured(both) == (("pubkeyacceptedalgorithms", "rsa-sha2-512"),)


@pytest.mark.parametrize(
    ("value", "accepted", "refused"),
    [
        ("ssh-ed25519", ["ssh-ed25519"], ["ssh-rsa", "ecdsa-sha2-nistp256"]),
        ("rsa-sha2-256", ["ssh-rsa"], ["ssh-ed25519"]),  # an RSA key signs with SHA-2
        ("-rsa-sha2-*", ["ssh-ed25519"], ["ssh-rsa"]),  # no SHA-2 left; ssh-rsa not a default
        ("+ssh-rsa", ["ssh-rsa", "ssh-ed25519"], []),
        ("ssh-ed25519-cert-v01@openssh.com", ["ssh-ed25519-cert-v01@openssh.com"], ["ssh-ed25519"]),
        ("rsa-sha2-512-cert-v01@openssh.com", ["ssh-rsa-cert-v01@openssh.com"], ["ssh-rsa"]),
    ],
)
def test_keys_are_offered_only_as_the_accepted_types(
    value: str, accepted: list[str], refused: list[str]
) -> None:
    target = SshTarget(alias="n0", hostname="h", algorithms=(("pubkeyacceptedalgorithms", value),))
    names = sshoffer.accepted_pubkeys(target)
    for kind, expected in [(k, True) for k in accepted] + [(k, False) for k in refused]:
        assert sshoffer.key_accepted(names, _Key(kind)) is expected, kind
    assert sshoffer.key_accepted(None, _Key("ssh-rsa"))  # not set: every key


def test_an_rsa_key_signs_with_the_accepted_sha2_algorithm_first() -> None:
    value = "rsa-sha2-256-cert-v01@openssh.com,ssh-ed25519,rsa-sha2-256,rsa-sha2-512"
    target = SshTarget(alias="n0", hostname="h", algorithms=(("pubkeyacceptedalgorithms", value),))
    near, far = socket.socketpair()
    with near, far:
        transport = sshoffer.transport_factory(target)(near)
        assert transport.preferred_pubkeys == ("rsa-sha2-256", "ssh-ed25519", "rsa-sha2-512")


class _Key:
    """A key as paramiko's client sees one: its type, and a certificate's blob (or none)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.public_blob = (
            paramiko.PublicBlob(kind, b"") if kind.endswith("-cert-v01@openssh.com") else None
        )

    def get_name(self) -> str:
        return self.kind.removesuffix("-cert-v01@openssh.com")


def test_without_a_list_the_offer_is_ssh_s_not_paramiko_s() -> None:
    """paramiko alone offers CBC, 3DES, MD5 and truncated MACs; ssh by default none."""
    near, far = socket.socketpair()
    with near, far:
        target = SshTarget(alias="n0", hostname="10.0.0.1")
        options = sshoffer.transport_factory(target)(near).get_security_options()
    assert options.ciphers == (
        "aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
        "aes128-ctr", "aes192-ctr", "aes256-ctr",
    )  # fmt: skip
    assert options.digests == (
        "hmac-sha2-256", "hmac-sha2-512", "hmac-sha2-256-etm@openssh.com",
        "hmac-sha2-512-etm@openssh.com", "hmac-sha1",
    )  # fmt: skip
    # Taking every AES cipher out leaves paramiko nothing (chacha20 it lacks): refused
    # before connecting, where it once offered 3des-cbc alone.
    assert sshoffer.offers((("ciphers", "-aes*"),)) == {"ciphers": ()}
