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


def _matches(name: str, pattern: str) -> bool:
    other = ALSO_NAMED.get(name)
    return fnmatchcase(name, pattern) or (other is not None and fnmatchcase(other, pattern))


def _unique(names: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))
