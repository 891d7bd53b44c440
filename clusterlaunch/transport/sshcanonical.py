"""Host names canonicalized as ssh canonicalizes them (OpenSSH's ssh.c, resolve_canonicalize).

Under ``CanonicalizeHostname yes`` ssh takes the host's ``HostName`` (``%h``
expanded; the name given where there is none), lowercases it, and tries it with
each of ``CanonicalDomains`` in the DNS, with a trailing dot (no search
domains); the first that resolves becomes the host name, and the config is read
a second time under it (``Host *.cluster`` blocks, ``Match canonical`` and
``final``), also where none resolved. It leaves alone addresses, names with
more than ``CanonicalizeMaxDots`` dots, and, unless the value is ``always``, a
host reached through ProxyJump or ProxyCommand (the proxy resolves the name).
``CanonicalizeFallbackLocal no`` makes a name that did not resolve an error.

paramiko's lookup canonicalized the name given, not HostName, and wrote the
result over HostName: ``Host gpu1`` with ``HostName n1`` was reached as
``gpu1.DOMAIN``, or as plain ``gpu1`` where that did not resolve; and a host
behind a jump host was canonicalized too, so other blocks' ``Port`` and
``User`` applied to it. ``CanonicalizePermittedCNAMEs`` (following DNS
aliases) is left to ``ssh -G`` (:mod:`clusterlaunch.transport.sshconfig`).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import Any

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport.sshkeywords import flag

_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}


def enabled(options: Mapping[str, Any]) -> bool:
    """``CanonicalizeHostname`` is on (ssh then reads the config a second time)."""
    value = options.get("canonicalizehostname", "no")
    return flag(value) is True or str(value).lower() == "always"


def canonical_host(options: Mapping[str, Any], alias: str) -> str:
    """The name ssh connects to and reads the config's second pass under.

    ``options``: the first pass's (HostName expanded); ``alias``: the name given.
    """
    host = resolved_host(options, alias)
    direct = all(_unset(options.get(key)) for key in ("proxycommand", "proxyjump"))
    mode = str(options.get("canonicalizehostname")).lower()
    if (not direct and mode != "always") or _is_address(host):
        return host
    if host.endswith("."):
        found = host[:-1] if _resolves(host, options) else None
    elif host.count(".") > _max_dots(options, alias):
        return host  # qualified enough: no fallback rule applies (ssh returns early)
    else:
        found = _with_domains(host, options)
    if found is not None:
        return found
    if flag(options.get("canonicalizefallbacklocal", "yes")) is False:
        domains = options.get("canonicaldomains") or "none"
        raise UsageError(
            f"SSH config, host {alias}: could not resolve host {host!r} in CanonicalDomains "
            f"{domains}, and CanonicalizeFallbackLocal is no (ssh fails there too)"
        )
    return host


def resolved_host(options: Mapping[str, Any], alias: str) -> str:
    """The host name after the first pass, as ssh reads the second under it: HostName
    (expanded already: :func:`.sshtokens.host_name`; the name given where there is
    none), lowercased unless an address. Expanded once: ``HostName a%%h`` is ``a%h``,
    where a second expansion made it ``a`` and the alias."""
    host = str(options.get("hostname", alias))
    return host if _is_address(host) else host.lower()


def _with_domains(host: str, options: Mapping[str, Any]) -> str | None:
    """The first ``host.DOMAIN`` of CanonicalDomains that resolves (``none`` ends the list)."""
    for domain in str(options.get("canonicaldomains", "")).split():
        if domain.lower() == "none":
            break
        candidate = f"{host}.{domain}"
        if _resolves(candidate + ".", options):
            return candidate
    return None


def _resolves(name: str, options: Mapping[str, Any]) -> bool:
    """``name`` has an address of the config's AddressFamily (getaddrinfo, as ssh asks)."""
    family = _FAMILIES.get(str(options.get("addressfamily", "any")).lower(), socket.AF_UNSPEC)
    try:
        return bool(socket.getaddrinfo(name, None, family, socket.SOCK_STREAM))
    except (OSError, UnicodeError):  # gaierror is an OSError; a label over 63 bytes is not
        return False


def _unset(value: object) -> bool:
    return value is None or str(value).lower() == "none"


def _is_address(host: str) -> bool:
    """ssh's ``is_addr_fast``: an address (or what looks like one) is never canonicalized."""
    return ":" in host or "%" in host or not host.strip("0123456789.")


def _max_dots(options: Mapping[str, Any], alias: str) -> int:
    text = str(options.get("canonicalizemaxdots", "1"))
    if not text.isdigit():
        raise UsageError(f"SSH config, host {alias}: CanonicalizeMaxDots {text!r}: use a number")
    return int(text)
