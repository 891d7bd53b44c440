"""Why a paramiko connection failed, in the words :mod:`.sshfailure` gives the OpenSSH client's.

Which failures are worth a retry: a handshake the server dropped (sshd's
``MaxStartups`` hangs up on a burst before its banner; a reset) is, once it
comes before the connect timeout. A server that accepted the connection and
then said nothing for the whole timeout is not: ``ssh`` gives up at its
``ConnectTimeout`` once, and four tries made a hung host cost 4 × 10 s and the
backoff (44 s, measured) before the launch could say so.
"""

from __future__ import annotations

import socket

import paramiko

from clusterlaunch.core.hostport import host_port
from clusterlaunch.core.model import SshTarget


def is_transient(exc: BaseException, waited: bool) -> bool:
    """``exc`` is the server dropping us during the handshake, before the timeout
    (``waited``: the attempt had already taken the whole connect timeout)."""
    return _in_handshake(exc) and not waited


def network_message(target: SshTarget, exc: BaseException, timeout: float, waited: bool) -> str:
    """One line for a connection that failed below authentication."""
    where = host_port(target.hostname, target.port)
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError) and exc.errors:
        # paramiko wraps the per-address socket errors; the first one says why.
        exc = next(iter(exc.errors.values()))
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"no answer from {where} within {timeout:g} s"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {where} (is sshd listening on that port?)"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {target.hostname!r}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return f"cannot connect to {where}: {exc}"
    if _in_handshake(exc):
        return _handshake_message(target, where, timeout if waited else None)
    keyword = next((k for mark, k in _NO_COMMON.items() if mark in str(exc)), None)
    if keyword is not None:
        return (
            f"{where}: no {keyword} in common with the server ({exc}), as ssh would find "
            f"none; if you trust the server, add one of its own to the SSH config: {keyword} +NAME"
        )
    return f"{where}: {str(exc) or type(exc).__name__}"


def suspended(detail: str, stopped: float) -> str:
    """``detail`` of an attempt during which this controller was stopped for ``stopped``
    seconds (Ctrl-Z): its timers ran on while it read nothing, so the server is not to blame."""
    if stopped <= 0:
        return detail
    return (
        f"{detail} (clusterlaunch itself was suspended for {stopped:.0f} s of that time: "
        "the server may have answered)"
    )


def _handshake_message(target: SshTarget, where: str, waited: float | None) -> str:
    """A handshake that ended (``waited``: None) or stayed silent for ``waited`` seconds."""
    via, who = "", "the server"
    if target.proxy_command:
        via = f" (through ProxyCommand {target.proxy_command!r})"
        who = "the server or the proxy"
    if waited is not None:
        return f"no SSH handshake with {where}{via} within {waited:g} s: {who} did not answer"
    return f"no SSH handshake with {where}{via}: {who} hung up"


_NO_COMMON = {
    "no acceptable ciphers": "Ciphers",
    "no acceptable macs": "MACs",
    "no acceptable kex": "KexAlgorithms",
    "no acceptable host key": "HostKeyAlgorithms",
}
"""paramiko's words where the key exchange found nothing in common -> the list to widen."""


def _in_handshake(exc: BaseException) -> bool:
    """The connection ended, or went quiet, before the handshake was done.

    paramiko says so in several ways: the banner unread, no session for
    authentication, or the reader's EOF (the handshake deadline ends it so too).
    """
    if isinstance(exc, ConnectionResetError | EOFError):
        return True
    text = str(exc)
    return "Error reading SSH protocol banner" in text or "No existing session" in text
