"""Host names and addresses of a hosts file: what OpenSSH takes, and what only looks like one.

``root@node0:22222``, ``ssh://node0``, ``[::1]`` and ``10.0.0.1:29500`` are how ssh,
URLs and other tools write a destination or an address; a hosts file keeps the
user, the port and the host each in its own key, so each such form is refused with
the keys to write instead. Used by :mod:`clusterlaunch.core.hostfields`; pure, no I/O.
"""

from __future__ import annotations

import ipaddress
import re
import reprlib
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core.errors import HostsFileError

# What OpenSSH's valid_hostname() and valid_ruser() (misc.c) refuse: a name is
# substituted into a ProxyCommand (%h, %r) that a shell runs, so
# "pxn$(touch /tmp/pwned)" would run a command on this machine.
_SSH_REFUSES_IN_HOST = frozenset("'`\"$\\;&<>|(){},")
_SSH_REFUSES_IN_USER = frozenset("'`\";&<>|(){}")
# What torchrun takes as its rendezvous host (torch/distributed/elastic/rendezvous/utils.py).
_TORCHRUN_HOST = re.compile(r"[\w.:-]")
_MAX_NAME = 255


class _Short(reprlib.Repr):
    """reprlib's cut-short repr, lists from YAML (which know their lines) included."""

    def repr_LineList(self, value: list[Any], level: int) -> str:  # reprlib calls it by name
        return self.repr_list(value, level)


_SHORT = _Short()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxdict = 4
_SCHEME = "ssh://"
# One colon then digits: a port (an IPv6 address has two colons at least, "::1").
_WITH_PORT = re.compile(r"([^:\[\]]+):([0-9]{1,5})")
# A URL's IPv6 form: brackets around an address that has a colon, maybe a port after.
_BRACKETED = re.compile(r"\[([^\[\]]*:[^\[\]]*)\](?::([0-9]{1,5}))?")


def shown(value: Any) -> str:
    """A value quoted for a one-line message, never longer than a line."""
    return _SHORT.repr(value)


@dataclass(frozen=True)
class Written:
    """A destination as written, in parts: ``user@host:port``, ``[v6]:port``, ``ssh://``."""

    host: str
    user: str | None = None
    port: str | None = None
    url: bool = False
    bracketed: bool = False


def written_parts(name: str) -> Written:
    """``name`` taken apart the way ssh, URLs and torchrun's ``HOST:PORT`` write one."""
    rest = name.removeprefix(_SCHEME)
    user = None
    if "@" in rest:
        user, _, rest = rest.rpartition("@")
    bracketed = _BRACKETED.fullmatch(rest)
    if bracketed:
        return Written(bracketed[1], user, bracketed[2], name != rest, True)
    with_port = _WITH_PORT.fullmatch(rest)
    host, port = with_port.groups() if with_port else (rest, None)
    return Written(host, user, port, name.startswith(_SCHEME))


def destination_fix(name: str) -> str | None:
    """Why ``host: NAME`` holds more than a host (a user, a port, a URL), with the keys to
    write instead; ``None`` when it is a host name (or an IPv6 address: ``::1``)."""
    parts = written_parts(name)
    if parts.host == name:
        return None
    if parts.user is not None and any(char in parts.user for char in "[],"):
        return (
            f"{shown(name)} has an '@' after a host expression; a host expression holds no "
            "user: write the hosts in host: and the user in user:"
        )
    keys = [f"host: {shown(parts.host)}"]
    keys += [] if parts.user is None else [f"user: {shown(parts.user)}"]
    keys += [] if parts.port is None else [f"port: {parts.port}"]
    written = ", ".join(keys[:-1]) + f" and {keys[-1]}" if len(keys) > 1 else keys[0]
    if parts.url:
        what = "is a URL"
    elif parts.bracketed:
        what = "has brackets, which only a URL puts around an IPv6 address"
    else:
        held = [part for part, value in (("a user", parts.user), ("a port", parts.port)) if value]
        what = f"has {' and '.join(held)} in it"
    return f"{shown(name)} {what}; write {written}"


def address_problem(
    value: str, key: str = "--master-addr ", port_key: str = "--master-port "
) -> str | None:
    """Why ``value`` is not a host name or address (``addr``, ``--master-addr``), or ``None``.

    ``key`` and ``port_key`` write the fix: ``master_addr: `` and ``master_port: `` in a
    hosts file, the flags on the command line.
    """
    parts = written_parts(value)
    if parts.url:
        return "is a URL; give a host name or address"
    if parts.user is not None:
        return "contains '@'; give a host name or address"
    if parts.port is not None:
        return f"has a port in it; write {key}{parts.host} and {port_key}{parts.port}"
    if parts.bracketed:
        return f"has brackets; write {key}{parts.host} without brackets"
    return host_name_problem(value)


def master_address_problem(value: str, key: str) -> str | None:
    """Why torchrun would refuse ``value`` as its master address, or ``None``; ``key`` is
    what to set instead (``master_addr:``, ``--master-addr``).

    torchrun's static rendezvous checks the host of ``MASTER_ADDR:PORT`` against
    ``[\\w.:-]+`` (``parse_rendezvous_endpoint``, torch 2.13) on every node and fails
    there with a traceback: an IPv6 zone (``fe80::1%eth0``) passed the preflight,
    then ended the job.
    """
    if "%" in value and _is_ipv6(value):
        return (
            f"has an IPv6 zone (%{value.partition('%')[2]}), which torchrun refuses in its "
            f"master address; set {key} to an address of node 0 without a zone "
            "(a global or unique-local one)"
        )
    for char in value:
        if not _TORCHRUN_HOST.fullmatch(char):
            return (
                f"contains {char!r}, which torchrun refuses in its master address (it takes "
                f"letters, digits, '_', '.', ':' and '-'); set {key} to another name or "
                "address of node 0"
            )
    return None


def host_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be an SSH destination or an address, or ``None``.

    The rules of OpenSSH's ``valid_hostname``, which makes ``ssh`` exit with
    "hostname contains invalid characters"; also refused: anything
    unprintable (not only ASCII control characters), names longer than 255
    characters, ``%`` outside an IPv6 zone (paramiko expands ``%`` tokens
    in a ProxyCommand again after substituting the name), and ``:`` outside an
    IPv6 address (``node1:``, ``node1:x``: no name resolves).
    """
    if not name:
        return "is empty"
    if len(name) > _MAX_NAME:
        return f"is longer than {_MAX_NAME} characters"
    if name.startswith("-"):
        return "starts with '-' (ssh would read it as an option)"
    for char in name:
        if char in _SSH_REFUSES_IN_HOST or char.isspace() or not char.isprintable():
            return f"contains {char!r}, which OpenSSH refuses in a host name"
    if "%" in name and not _is_ipv6(name):
        return "contains '%', which is allowed only in an IPv6 address's zone (fe80::1%eth0)"
    if ":" in name and not _is_ipv6(name):  # "node1:" got as far as the preflight's lookup
        return "contains ':' but is no IPv6 address; a host name holds no ':'"
    return None


def user_name_problem(user: str) -> str | None:
    """Why ``user`` cannot be an SSH user name (OpenSSH's ``valid_ruser``), or ``None``."""
    if user.startswith("-"):
        return "starts with '-' (ssh would read it as an option)"
    if len(user) > _MAX_NAME:
        return f"is longer than {_MAX_NAME} characters"
    for index, char in enumerate(user):
        if char in _SSH_REFUSES_IN_USER or not char.isprintable():
            return f"contains {char!r}, which OpenSSH refuses in a user name"
        if char.isspace() and user[index + 1 : index + 2] == "-":
            return "has a '-' after a space, which OpenSSH refuses in a user name"
    if user.endswith("\\"):
        return "ends with a backslash, which OpenSSH refuses in a user name"
    return None


def _is_ipv6(name: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(name), ipaddress.IPv6Address)
    except ValueError:
        return False


def canonical_address(name: str) -> str | None:
    """``name``'s one spelling if it is an IP address, else ``None``: ``FD42:6:0::11`` and
    ``fd42:6::11`` are one address (zero compression, case), and so are
    ``::ffff:10.0.0.1`` and ``10.0.0.1`` (Linux dials the second for the first)."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def check_host_name(name: str, path: str, line: int | None, field: str) -> None:
    """A ``host:`` (each name of a range) or an address: one OpenSSH would take."""
    refuse_destination_form(name, path, line, field)
    problem = host_name_problem(name)
    if problem is not None:
        raise HostsFileError(path, line, field, f"{shown(name)} {problem}")


def refuse_destination_form(name: str, path: str, line: int | None, field: str) -> None:
    """``host:`` with a user, a port, brackets or ``ssh://``: refused, with the keys to write."""
    fix = destination_fix(name)
    if fix is not None:
        raise HostsFileError(path, line, field, fix)
