"""IdentityFile and UserKnownHostsFile paths as ssh expands them, for both SSH clients.

ssh expands such a path when it connects: a leading ``~``, then
``${VAR}`` and the % tokens of ssh_config(5) in one pass (``tilde_expand_filename``,
then ``default_client_percent_dollar_expand``), from the values the connection
really uses: the command line's ``-l`` and ``-p`` win over the config, as the
hosts file's ``user`` and ``port`` do here. paramiko's lookup expands fewer tokens
(``%%``, ``%i``, ``%j``, ``%k``, ``%L``, ``%n``, ``%p`` stay as written), replaces a
``~`` anywhere in the path, takes ``%l`` from the DNS, hashes ``%C`` from the
alias and the short host name, and knows nothing of the hosts file: a key named
with any of those was another file for clusterlaunch than for ssh. It leaves
UserKnownHostsFile as written: ``~/.ssh/known_hosts.d/%h`` was a file named
``%h``, and every host "unknown" to the paramiko client (ssh -vvv: "expanded
UserKnownHostsFile '.../kh_%h_%n' -> '.../kh_127.0.0.11_node0'").

What no single rule expands as every ssh does is left as written, with the
reason (:func:`ssh_path`): ``%C`` with a ``ProxyJump`` (OpenSSH versions
put the jump into it differently), ``%j`` (OpenSSH 9.2 refuses it, later
versions know it), an unknown token, an unset ``${VAR}``. The paramiko client
refuses such a path in one line (``sshcompat``); the OpenSSH client needs none of
this: ssh reads the config's IdentityFile and UserKnownHostsFile lines itself.

Home (``~``, ``%d``, and where the default config and known_hosts live) is the
password database's, as ssh takes it (:func:`ssh_home`), not ``$HOME``.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import os
import pwd
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import SshTarget

TOKENS = "CdhijkLlnpru"
"""The tokens ssh_config(5) lists for IdentityFile and UserKnownHostsFile, besides ``%%``
(``%j``: not in 9.2)."""


@dataclass(frozen=True)
class Connection:
    """What ssh knows of a connection when it expands a path."""

    alias: str
    """The destination as given (``%n``)."""
    hostname: str
    port: int
    user: str | None
    """The remote user, if one was given (else the local one, as ssh takes it)."""
    key_alias: str | None = None
    jump: str | None = None


class SshRefusesToo(str):
    """A reason why not that ssh itself meets as well (an unset ``${VAR}``): no other
    client would connect, so the fix is the config or the environment."""


def ssh_path(value: str, connection: Connection) -> tuple[str, str | None]:
    """``value`` as ssh expands it, and None; or ``value`` as written and why not."""
    path = tilde(value)
    if "%" not in path and "${" not in path:
        return path, None
    expanded: list[str] = []
    index = 0
    while index < len(path):
        char = path[index]
        if char == "$" and path.startswith("${", index):
            end = path.find("}", index)
            name = path[index + 2 : end] if end > 0 else ""
            if end < 0 or name not in os.environ:
                unset = f"${{{name}}} is not set" if end > 0 else "an unclosed ${"
                return value, SshRefusesToo(unset)
            expanded.append(os.environ[name])
            index = end + 1
            continue
        if char != "%":
            expanded.append(char)
            index += 1
            continue
        token = path[index + 1 : index + 2]
        found, why = _token_value(token, connection)
        if why is not None:
            return value, why
        expanded.append(found)
        index += 2
    return "".join(expanded), None


COMMAND_TOKENS = "hnpr"
"""The tokens ssh_config(5) lists for ProxyCommand, besides ``%%``. No ``~`` and no
``${VAR}``: ssh hands the command to a shell, which expands those."""


def ssh_command(value: str, connection: Connection) -> tuple[str, str | None]:
    """A ``ProxyCommand`` as ssh expands it (``ssh -p 2222 -l bob`` ran ``%p=2222 %r=bob
    %h=mixed.host %n=n0 %%=%``, OpenSSH 9.2), and None; or as written and why not."""
    parts: list[str] = []
    index = 0
    while (found := value.find("%", index)) >= 0:
        token = value[found + 1 : found + 2]
        if token != "%" and (not token or token not in COMMAND_TOKENS):
            return value, f"%{token} is no token of ProxyCommand (ssh refuses it)"
        parts += [value[index:found], "%" if token == "%" else _FACTS[token](connection)]
        index = found + 2
    return "".join([*parts, value[index:]]), None


def host_name(value: str, alias: str) -> tuple[str, str | None]:
    """A config's ``HostName`` as ssh expands it, and None; or as written and why not.

    ssh.c: ``percent_expand(options.hostname, "h", host)``: ``%%`` and ``%h`` (the name
    given, as typed) only; any other ``%`` is fatal (``ssh -G``: "percent_expand: failed"
    for ``HostName fe80::1%eth0``, ``fe80::1%e6t0`` for ``fe80::1%%e6t0``, OpenSSH 9.2).
    A name given without a ``HostName`` is never expanded. paramiko expanded ``%h`` in
    both and left ``%%`` as written: ``fe80::1%h6br`` became another host.
    """
    parts: list[str] = []
    index = 0
    while (found := value.find("%", index)) >= 0:
        token = value[found + 1 : found + 2]
        if token not in ("%", "h"):
            what = f"%{token} is no token of HostName" if token else "a '%' ends it"
            return value, f"{what}; ssh refuses it (it knows %h and %%): write %% for a '%'"
        parts += [value[index:found], "%" if token == "%" else alias]
        index = found + 2
    return "".join([*parts, value[index:]]), None


def _token_value(token: str, connection: Connection) -> tuple[str, str | None]:
    """(value, None), or ("", why ssh's value cannot be known here)."""
    if token == "%":
        return "%", None
    if not token or token not in TOKENS:
        return "", f"%{token} is no token of ssh_config(5) for paths (ssh refuses it)"
    if token == "j":
        return "", "%j is unknown to OpenSSH 9.2 and before (it refuses it)"
    if token == "C" and connection.jump:
        return "", f"%C with ProxyJump {connection.jump} differs between OpenSSH versions"
    return _FACTS[token](connection), None


@functools.cache
def ssh_home() -> str:
    """The home ssh expands ``~`` and ``%d`` to and reads ``~/.ssh/config`` from.

    The password database's, not ``$HOME``: with ``HOME=/elsewhere``, ``ssh -G`` gave
    ``userknownhostsfile /root/kh /root/kh2`` for ``~/kh %d/kh2`` and ignored
    /elsewhere/.ssh/config (OpenSSH 9.2), as under ``sudo -E``. ``Include``
    alone globs ``~`` from ``$HOME`` (sshinclude). A uid without an entry (a
    container's bare ``--user``) leaves ssh unable to run; ``$HOME`` then.
    """
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def tilde(path: str) -> str:
    """``path`` with a leading ``~`` or ``~user`` expanded as ssh's ``tilde_expand`` does."""
    if path == "~":
        return ssh_home()
    if path.startswith("~/"):
        return ssh_home().rstrip("/") + path[1:]  # a home of "/" gives "/x", not "//x"
    return os.path.expanduser(path) if path.startswith("~") else path


def _local_host() -> str:
    return socket.gethostname()


@functools.cache
def _local_user() -> str:
    # Once: on a login node the password database may be LDAP, a query per host.
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        raise _no_such_user() from None


def users_known(targets: list[SshTarget]) -> list[SshTarget]:
    """``targets``, where each has a user to log in as: a target without one logs in as
    this uid's user (paramiko: ``$LOGNAME``, ``$USER``, then the password database), and
    a uid with none of them (a container's bare ``--user``) is refused in ssh's words,
    once: paramiko's getpass raised KeyError, a traceback; ssh said it for every host."""
    if any(target.user is None and not target.is_local for target in targets):
        try:
            getpass.getuser()
        except (KeyError, OSError):  # OSError from Python 3.13 on
            raise _no_such_user() from None
    return targets


def _no_such_user() -> UsageError:
    return UsageError(
        f"No user exists for uid {os.getuid()} (no entry in the password database, and "
        "USER and LOGNAME are unset); add one (a container started with --user needs a "
        "line in /etc/passwd), or name the user to log in as: user: in the hosts file or "
        "User in the SSH config"
    )


def _remote_user(connection: Connection) -> str:
    return connection.user or _local_user()


def _remote_host(connection: Connection) -> str:
    # ssh lowercases the host name (hostnames.ssh_host_name): HostName MiXeD.Example gave
    # %h "mixed.example" (ssh -v, OpenSSH 9.2), where %n and %k keep the alias as typed.
    return connection.hostname.lower()


def _connection_hash(connection: Connection) -> str:
    # ssh's ssh_connection_hash: SHA-1 of %l%h%p%r (and the jump, "" without one).
    joined = _local_host() + _remote_host(connection) + str(connection.port)
    return hashlib.sha1((joined + _remote_user(connection)).encode()).hexdigest()


_FACTS: Mapping[str, Callable[[Connection], str]] = {
    "C": _connection_hash,
    "d": lambda _: ssh_home(),
    "h": _remote_host,
    "i": lambda _: str(os.getuid()),
    "k": lambda c: c.key_alias or c.alias,
    "L": lambda _: _local_host().split(".")[0],
    "l": lambda _: _local_host(),
    "n": lambda c: c.alias,
    "p": lambda c: str(c.port),
    "r": _remote_user,
    "u": lambda _: _local_user(),
}
