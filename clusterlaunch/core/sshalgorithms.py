"""The SSH config's algorithm lists (``Ciphers``, ``MACs``, ``KexAlgorithms``,
``HostKeyAlgorithms``, ``PubkeyAcceptedAlgorithms``), as ssh reads them.

A list replaces the defaults; one that starts with ``+`` is appended to them,
``-`` is taken out of them and ``^`` is put before them. Names may be
wildcards (``aes*-gcm@openssh.com``). Only what the client supports is kept,
in the order the config gives (ssh_config(5)).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

KEYWORDS = ("ciphers", "macs", "kexalgorithms", "hostkeyalgorithms", "pubkeyacceptedalgorithms")
"""The config keywords read for the paramiko transport (lower case, as parsed)."""
OLD_NAMES = {"pubkeyacceptedalgorithms": "pubkeyacceptedkeytypes"}
"""Keywords' names before OpenSSH 8.5, which ssh still reads."""

SSH_DEFAULTS = {
    "ciphers": (
        "chacha20-poly1305@openssh.com", "aes128-ctr", "aes192-ctr", "aes256-ctr",
        "aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
    ),
    "macs": (
        "umac-64-etm@openssh.com", "umac-128-etm@openssh.com", "hmac-sha2-256-etm@openssh.com",
        "hmac-sha2-512-etm@openssh.com", "hmac-sha1-etm@openssh.com", "umac-64@openssh.com",
        "umac-128@openssh.com", "hmac-sha2-256", "hmac-sha2-512", "hmac-sha1",
    ),
    "kexalgorithms": (
        "mlkem768x25519-sha256", "sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com",
        "curve25519-sha256", "curve25519-sha256@libssh.org", "ecdh-sha2-nistp256",
        "ecdh-sha2-nistp384", "ecdh-sha2-nistp521", "diffie-hellman-group-exchange-sha256",
        "diffie-hellman-group16-sha512", "diffie-hellman-group18-sha512",
        "diffie-hellman-group14-sha256",
    ),
    "hostkeyalgorithms": (
        "ssh-ed25519-cert-v01@openssh.com", "ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "ecdsa-sha2-nistp384-cert-v01@openssh.com", "ecdsa-sha2-nistp521-cert-v01@openssh.com",
        "sk-ssh-ed25519-cert-v01@openssh.com", "sk-ecdsa-sha2-nistp256-cert-v01@openssh.com",
        "rsa-sha2-512-cert-v01@openssh.com", "rsa-sha2-256-cert-v01@openssh.com",
        "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
        "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com",
        "rsa-sha2-512", "rsa-sha2-256",
    ),
}  # fmt: skip
"""What ssh offers when the config names no list (OpenSSH's myproposal.h, 9.x; ``ssh -G``
here). Not CBC, 3DES, MD5 or truncated MACs: paramiko's defaults had them, so a server
offering only ``aes128-cbc`` got a connection that ssh refuses ("no matching cipher")."""

ALSO_NAMED = {"curve25519-sha256@libssh.org": "curve25519-sha256"}
"""One algorithm under two names (RFC 8731 named libssh's): a client that has only
one of them answers to both, as OpenSSH, which has both, does."""


def configured(found: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    """The lists a config lookup sets, as (keyword, value)."""
    named = ((key, found.get(key) or found.get(OLD_NAMES.get(key, key))) for key in KEYWORDS)
    return tuple((key, str(value)) for key, value in named if value)


def preferred(value: str, supported: Sequence[str], defaults: Sequence[str]) -> tuple[str, ...]:
    """The algorithms to offer, in order, for a config ``value`` (empty: none supported).

    ``supported`` is every algorithm the client has, ``defaults`` those it offers
    when the config says nothing.
    """
    head, patterns = value[:1], [p for p in value.lstrip("+-^").split(",") if p]
    named = [name for pattern in patterns for name in supported if _matches(name, pattern)]
    if head == "-":
        return tuple(name for name in defaults if name not in named)
    if head == "+":
        return _unique([*defaults, *named])
    if head == "^":
        return _unique([*named, *defaults])
    return _unique(named)


def also_named(name: str, names: Sequence[str]) -> bool:
    """``name``, under either of its names (:data:`ALSO_NAMED`), is one of ``names``."""
    return name in names or ALSO_NAMED.get(name) in names


def _matches(name: str, pattern: str) -> bool:
    other = ALSO_NAMED.get(name)
    return fnmatchcase(name, pattern) or (other is not None and fnmatchcase(other, pattern))


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
