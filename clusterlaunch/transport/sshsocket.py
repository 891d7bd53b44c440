"""The TCP connection under a paramiko client: small messages sent and acknowledged at once.

Measured on loopback against OpenSSH 9.2's sshd, one host, 8 connections each
(``connect`` then one ``open_session``), in median ms:

* Nagle's algorithm held paramiko's small handshake writes until the server's
  delayed ACK (~40 ms): connect 78 → 40 with ``TCP_NODELAY``, which ssh sets on
  its connection too.
* The first channel after authentication waited another ~40 ms: sshd follows
  the authentication with messages of its own (``hostkeys-00@openssh.com`` ...)
  and, its Nagle still on until a session starts, holds the channel's
  confirmation until they are acknowledged, while Linux delays that ACK. ssh
  waits the same 40 ms. ``TCP_QUICKACK`` after each read (it is not sticky):
  open 45 → 3.

Together ~80 ms less per host before its first command starts. ``TCP_QUICKACK``
is Linux only; elsewhere the socket only gets ``TCP_NODELAY``.

Whatever carries a connection (this socket, a ProxyJump tunnel: :class:`TunnelSocket`,
a ProxyCommand: ``sshproxy.ProxyProcess``) notes when it last read data
(:func:`last_read`): the keepalive asks nothing of a server that is talking anyway.
"""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING, Any

from clusterlaunch.core.model import SshTarget

if TYPE_CHECKING:
    import paramiko

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


class QuickAckSocket(socket.socket):
    """A TCP socket that acknowledges what it reads without delay, and notes when it last
    read anything (the keepalive asks a server that is talking anyway nothing)."""

    __slots__ = ("last_read",)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data = super().recv(bufsize, flags)
        if data:
            self.last_read = time.monotonic()
            if _QUICKACK is not None:
                # The kernel leaves quick-ACK mode again on its own (it is a hint).
                self.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        return data


class TunnelSocket:
    """A jump host's ``direct-tcpip`` channel as the next hop's socket (ProxyJump): the
    channel itself, but noting when it last read data, as :class:`QuickAckSocket` does."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel
        self.last_read: float | None = None

    def recv(self, bufsize: int) -> bytes:
        data = self.channel.recv(bufsize)
        if data:
            self.last_read = time.monotonic()
        return data

    def __getattr__(self, name: str) -> Any:  # send, settimeout, close, _closed ...
        return getattr(self.channel, name)


def last_read(sock: object) -> float | None:
    """When ``sock`` (a :class:`QuickAckSocket`, a :class:`TunnelSocket`, or the
    ProxyCommand's :class:`~clusterlaunch.transport.sshproxy.ProxyProcess`) last read
    data; None before its first read, and for anything else."""
    return getattr(sock, "last_read", None)


_FAMILIES = {"inet": socket.AF_INET, "inet6": socket.AF_INET6}


def dial_target(target: SshTarget, timeout: float) -> socket.socket:
    """A connected TCP socket to ``target``, as its SSH config says (AddressFamily,
    ConnectionAttempts)."""
    family, attempts = target.address_family, target.connection_attempts
    return dial(target.hostname, target.port, timeout, family, attempts)


def dial(
    host: str, port: int, timeout: float, family: str = "any", attempts: int = 1
) -> socket.socket:
    """A connected TCP socket to ``host:port``, tried ``attempts`` times a second apart
    (ssh's ``ConnectionAttempts``, ssh_connect_direct), a name that does not resolve
    (``socket.gaierror``) at once."""
    for _ in range(attempts - 1):
        try:
            return _dial_once(host, port, timeout, family)
        except socket.gaierror:
            raise
        except OSError:
            time.sleep(1.0)  # as ssh: "Trying again..." after a second
    return _dial_once(host, port, timeout, family)


def _dial_once(host: str, port: int, timeout: float, family: str) -> socket.socket:
    """Each address of ``host`` in turn, as ssh and paramiko do; the first address's
    error when none answers."""
    errors: list[OSError] = []
    wanted = _FAMILIES.get(family, 0)  # AddressFamily: ssh dials only those addresses
    for found, kind, proto, _, address in socket.getaddrinfo(
        host, port, wanted, socket.SOCK_STREAM
    ):
        sock = QuickAckSocket(found, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        return sock
    if errors:
        raise errors[0]
    raise socket.gaierror(f"no address for {host!r}")
