"""An :class:`~clusterlaunch.core.model.SshTarget` from a host's resolved SSH options.

The options come from paramiko's lookup of the files ssh reads
(:mod:`clusterlaunch.transport.sshconfig`) or from ``ssh -G``
(:mod:`clusterlaunch.transport.sshresolve`); here they become plain data, with
every path and command expanded as ssh expands it for this connection
(:mod:`clusterlaunch.transport.sshtokens`): the hosts file's ``user`` and ``port``
win over the config, as ``ssh -l``/``-p`` do.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clusterlaunch.core import limits, sshalgorithms
from clusterlaunch.core.defaults import GLOBAL_KNOWN_HOSTS, RSA_MINIMUM_BITS
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.core.sshargv import SESSION_KEYWORDS
from clusterlaunch.transport.sshkeywords import FLAGS, flag, spelled
from clusterlaunch.transport.sshtokens import Connection, ssh_command, ssh_path, tilde

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")

Where = Callable[[str, str], str]
"""``file:line`` of the line that set a keyword (lower case) to a value, for messages."""

# Yes/no values as ssh reads them (sshkeywords.FLAGS), and multistate_strict_hostkey
# (any case): ssh refuses a config with any other value. Read as ``== "yes"``,
# ``IdentitiesOnly true`` offered every key and ``StrictHostKeyChecking true`` accepted
# a new host key, where ssh offers one key and refuses the host.
_STRICT = {
    "yes": "yes",
    "true": "yes",
    "ask": "ask",
    "accept-new": "accept-new",
    "no": "no",
    "false": "no",
    "off": "no",
}
_SSH_TIME = re.compile(r"(?:\d+[smhdwSMHDW]?)+")
_TIME_PART = re.compile(r"(\d+)([smhdwSMHDW]?)")
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def target_from(found: Mapping[str, Any], spec: HostSpec, where: Where | None = None) -> SshTarget:
    """An SshTarget from resolved config options (paramiko's lookup, or ``ssh -G``).

    ``where`` names the line of a value ssh would refuse (``ssh -G``'s values were
    read by ssh, which refuses such a config itself).
    """
    read = _Options(found, spec.host, where)
    hostname = found.get("hostname", spec.host)
    port = spec.port or _service(found.get("port")) or read.number("port", 22, limits.SSH_PORT)
    user = spec.user or found.get("user")
    jump = _proxy_jump(found.get("proxyjump"))
    connection = Connection(spec.host, hostname, port, user, found.get("hostkeyalias"), jump)
    return SshTarget(
        alias=spec.host,
        hostname=hostname,
        port=port,
        user=user,
        identity_files=tuple(identity_files(found, connection)),
        identities_only=read.flag("identitiesonly"),
        use_agent=str(found.get("identityagent", "")).lower() != "none",
        forward_agent=flag(found.get("forwardagent")) is True,  # else no, or a socket
        address_family=str(found.get("addressfamily", "any")).lower(),
        known_hosts_files=tuple(known_hosts_files(found, connection)),
        global_known_hosts_files=global_known_hosts_files(found),
        hash_known_hosts=read.flag("hashknownhosts"),
        proxy_jump=jump,
        proxy_command=_proxy_command(found.get("proxycommand"), connection),
        connect_timeout=read.seconds("connecttimeout", limits.CONNECT_TIMEOUT),
        connection_attempts=read.number("connectionattempts", 1, limits.CONNECTION_ATTEMPTS),
        host_key_checking=read.host_key_checking(),
        algorithms=sshalgorithms.configured(found),
        given=tuple(key for key in ("user", "port") if getattr(spec, key)),
        session_keywords=tuple(key for key in SESSION_KEYWORDS if key in found),
        required_rsa_size=max(RSA_MINIMUM_BITS, read.number("requiredrsasize", 0, limits.RSA_SIZE)),
        send_env=tuple(found.get("sendenv", ())),
        set_env=tuple((w.partition("=")[0], w.partition("=")[2]) for w in found.get("setenv", ())),
    )


class _Options:
    """A host's values read as ssh reads them; one ssh refuses is one line naming it."""

    def __init__(self, found: Mapping[str, Any], alias: str, where: Where | None) -> None:
        self._found, self._alias, self._where = found, alias, where

    def flag(self, key: str) -> bool:
        return self._chosen(key, FLAGS, False, "yes or no")

    def host_key_checking(self) -> str | None:
        return self._chosen("stricthostkeychecking", _STRICT, None, "yes, accept-new or ask")

    def number(self, key: str, default: float | None, kind: limits.Number) -> Any:
        """A number in the range the command line allows (int("abc") was a traceback,
        ConnectTimeout nan a hang)."""
        text = self._found.get(key)
        if text is None:
            return default
        try:
            return kind(str(text).strip())
        except UsageError:
            raise self._refused(key, str(text), f"use {kind.allowed}") from None

    def seconds(self, key: str, kind: limits.Number) -> float | None:
        """A time as ssh writes it (``90``, ``1m30s``, ``2h``: readconf's convtime), in the
        range the command line allows; ``0`` (ssh: no timeout of its own) and unset are
        None, the command line's default. ``ConnectTimeout 1m`` was refused, for both
        clients, where ssh waits a minute."""
        text = self._found.get(key)
        if text is None:
            return None
        written = value = str(text).strip()
        if _SSH_TIME.fullmatch(written):
            total = sum(int(n) * _TIME_UNITS[u.lower()] for n, u in _TIME_PART.findall(written))
            if total == 0:
                return None
            value = str(total)
        try:
            return float(kind(value))
        except UsageError:
            raise self._refused(key, written, f"use {kind.allowed}") from None

    def _chosen(self, key: str, table: Mapping[str, Any], default: Any, allowed: str) -> Any:
        text = self._found.get(key)
        if text is None:
            return default
        value = str(text).strip()
        if value.lower() not in table:
            raise self._refused(key, value, f"ssh refuses this value; use {allowed}")
        return table[value.lower()]

    def _refused(self, key: str, value: str, fix: str) -> UsageError:
        place = self._where(key, value) if self._where else "SSH config"
        named = f"{spelled(key)} {limits.shown(value)}"
        return UsageError(f"{place}, host {self._alias}: {named}: {fix}")


def identity_files(found: Mapping[str, Any], connection: Connection) -> list[str]:
    """The config's IdentityFile paths as ssh expands them (as written where it cannot)."""
    return [ssh_path(value, connection)[0] for value in found.get("identityfile", [])]


def known_hosts_files(found: Mapping[str, Any], connection: Connection) -> list[str]:
    """The config's UserKnownHostsFile paths as ssh expands them (none: ``none``)."""
    names = _file_names(found, "userknownhostsfile") or list(DEFAULT_KNOWN_HOSTS)
    return [str(Path(ssh_path(name, connection)[0])) for name in names if name != "none"]


def _file_names(found: Mapping[str, Any], key: str) -> list[str]:
    """A list of file names: the words the lookup split (sshlookup), or ``ssh -G``'s."""
    value = found.get(key) or []
    names = value.split() if isinstance(value, str) else list(value)
    if "none" in names and len(names) > 1:  # ssh.c: fatal
        raise UsageError(
            f"SSH config, host {found.get('hostname')}: {spelled(key)}: "
            "none appears with other entries; ssh refuses it"
        )
    return names


def global_known_hosts_files(found: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's GlobalKnownHostsFile paths, as ssh expands them: a leading ``~`` only.

    ``ssh -vvv`` (OpenSSH 9.2) for ``GlobalKnownHostsFile ~/g /tmp/gk_%h``: "fopen
    /root/g", "fopen /tmp/gk_%h" (no token is expanded there, unlike UserKnownHostsFile).
    """
    names = _file_names(found, "globalknownhostsfile")
    return tuple(tilde(name) for name in names if name != "none") if names else GLOBAL_KNOWN_HOSTS


def _proxy_command(value: str | None, connection: Connection) -> str | None:
    """``ProxyCommand`` with its tokens expanded as ssh expands them (sshtokens.ssh_command)."""
    command, why = ssh_command(_none_is_none(value) or "", connection)
    if why is not None:
        raise UsageError(f"SSH config, host {connection.alias}: ProxyCommand {command}: {why}")
    return command or None


def _none_is_none(value: str | None) -> str | None:
    return None if value is None or value.lower() == "none" else value


def _proxy_jump(value: str | None) -> str | None:
    if not value or value.lower() == "none":
        return None
    # Several comma-separated hops are kept as written (an ssh:// URI as ssh -G shows
    # it); the transport chains them.
    return ",".join(_plain_hop(hop.strip()) for hop in value.split(","))


def _plain_hop(hop: str) -> str:
    user, host, port = split_hop(hop)  # one ssh refuses: refused here, for both clients
    if not hop.startswith(_URI):
        return hop
    host = f"[{host}]" if ":" in host else host
    return f"{user + '@' if user else ''}{host}{f':{port}' if port else ''}"


def split_hop(jump: str) -> tuple[str | None, str, int | None]:
    """(user, host, port) of one ``ProxyJump`` hop as ssh reads it (readconf.c's
    parse_jump): ``[user@]host[:port]``, ``[user@][v6addr][:port]``, or the URI form
    ``ssh://[user@]host[:port]``, which was read as the user "ssh:"."""
    if jump.startswith(_URI):  # case and all, as misc.c's parse_uri compares it
        return _uri_hop(jump)
    user, _, rest = jump.rpartition("@")
    if rest.startswith("["):
        host, _, after = rest[1:].partition("]")
        port = after.removeprefix(":")
    else:
        host, _, port = rest.partition(":")
    number = _hop_port(port) if port else None
    if not host or number == 0:
        raise UsageError(f"SSH config: ProxyJump {jump!r}: ssh refuses it; use [user@]host[:port]")
    return user or None, host, number


_URI = "ssh://"
# misc.c's valid_domain, which parse_uri asks of a URI's host: no IPv6 address (a ':'),
# unlike the plain form: ssh refuses "ssh://root@[fd42:6::10]:22" (OpenSSH 9.2,
# 'Invalid ProxyJump'), and paramiko went through it.
_DOMAIN = re.compile(r"(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9._-]*")
_URI_PARTS = re.compile(r"(?:([^@]*)@)?(\[[^\]]*\]|[^:/\[]*)(?::([^/]*))?(/.*)?")


def _uri_hop(jump: str) -> tuple[str | None, str, int | None]:
    """``ssh://[user[;params]@]host[:port][/]`` as misc.c's parse_uri reads it: the user
    URL-decoded, the host a domain name or IPv4 address (brackets stripped), no path."""
    parts = _URI_PARTS.fullmatch(jump[len(_URI) :])
    user, host, port, path = parts.groups() if parts else ("", "", None, None)
    user = None if user is None else _url_decoded(user.partition(";")[0])
    host = host[1:-1] if host.startswith("[") else host
    if ":" in host:
        fix = f"{user + '@' if user else ''}[{host}]{':' + port if port else ''}"
        raise UsageError(
            f"SSH config: ProxyJump {jump!r}: ssh refuses an IPv6 address in an ssh:// "
            f"URI; write {fix}"
        )
    number = _hop_port(port) if port else None
    if user == "" or not _DOMAIN.fullmatch(host) or number == 0 or (path or "/") != "/":
        raise UsageError(
            f"SSH config: ProxyJump {jump!r}: ssh refuses it; use ssh://[user@]host[:port]"
        )
    return user, host.removesuffix("."), number


def _hop_port(text: str) -> int:
    """A hop's port as misc.c's a2port reads it: 1-65535 or a service name (``ssh``); 0
    where ssh refuses it."""
    if text.isascii() and text.isdigit():
        return int(text) if 0 < int(text) < 65536 else 0
    return _service(text) or 0


def _url_decoded(text: str) -> str:
    """misc.c's urldecode: ``%XX`` and ``+`` (a space); "" where a ``%`` is no ``%XX``."""
    pieces = text.replace("+", " ").split("%")
    if any(not re.fullmatch(r"[0-9A-Fa-f]{2}", piece[:2]) for piece in pieces[1:]):
        return ""
    return pieces[0] + "".join(chr(int(piece[:2], 16)) + piece[2:] for piece in pieces[1:])


def _service(value: object) -> int | None:
    """A port written as a service name (``Port ssh``), as ssh's a2port reads it."""
    name = str(value or "").strip()
    if not name or name.isdigit():
        return None
    try:
        return socket.getservbyname(name, "tcp")
    except OSError:
        return None
