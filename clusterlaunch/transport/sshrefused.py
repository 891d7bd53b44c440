"""The SSH config settings the paramiko client cannot honour as ssh does, by value.

Each rule names a keyword, which of its values make ssh connect differently from
paramiko, and why; :mod:`clusterlaunch.transport.sshcompat` refuses a host whose
config says so, naming the file:line. ssh's defaults are never refused: Debian's
and Fedora's system files set some of these for every host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clusterlaunch.transport.sshkeywords import flag


def _set(value: str) -> bool:
    return value.lower() != "none"


def _yes(value: str) -> bool:
    return flag(value) is True or value.lower() == "ask"  # VerifyHostKeyDNS ask


def _no(value: str) -> bool:
    return flag(value) is False


def _socket(value: str) -> bool:
    return flag(value) is None  # a socket path, or ${VAR}


def _without_keys(value: str) -> bool:
    return "publickey" not in value.split(",")


RULES: tuple[tuple[str, Callable[[str], bool], str], ...] = (
    ("CertificateFile", _set, "paramiko ignores CertificateFile"),
    ("PKCS11Provider", _set, "paramiko cannot use a PKCS#11 token"),
    ("HostKeyAlias", _set, "paramiko ignores HostKeyAlias"),
    ("RevokedHostKeys", _set, "paramiko cannot refuse revoked keys"),
    ("KnownHostsCommand", _set, "paramiko cannot run KnownHostsCommand"),
    ("BindAddress", _set, "paramiko's connections cannot choose their source address"),
    ("BindInterface", _set, "paramiko's connections cannot choose their interface"),
    ("CheckHostIP", _yes, "paramiko does not check the key recorded for the address"),
    ("VerifyHostKeyDNS", _yes, "paramiko cannot check SSHFP records in the DNS"),
    (
        "HostbasedAuthentication",
        _yes,
        "ssh tries host-based authentication before keys; paramiko cannot do it",
    ),
    ("PubkeyAuthentication", _no, "ssh offers no key, and paramiko logs in with keys only"),
    (
        "PreferredAuthentications",
        _without_keys,
        "ssh offers no key, and paramiko logs in with keys only",
    ),
    ("ForwardAgent", _socket, "paramiko forwards only the agent $SSH_AUTH_SOCK names"),
    (
        "ProxyUseFdpass",
        _yes,
        "ssh takes a connected socket from the ProxyCommand; paramiko reads its output",
    ),
)


def refused(found: Mapping[str, Any], where: Callable[[str, str], str]) -> str | None:
    """The first rule ``found`` (a host's options) breaks, as ``FILE:LINE: Keyword value:
    why`` (``where(keyword, value)`` gives the line), or None."""
    for spelled, breaks, why in RULES:
        value = found.get(spelled.lower())
        if value is not None and str(value) and breaks(str(value)):
            return f"{where(spelled.lower(), str(value))}: {spelled} {value}: {why}"
    return None
