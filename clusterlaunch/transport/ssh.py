"""SSH transport on paramiko: exec, stream, keepalive (connecting: :mod:`.sshconnect`)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

import paramiko
import paramiko.agent

from clusterlaunch.core.commands import for_login_shell
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import keepalive, sshsocket
from clusterlaunch.transport.settings import SshSettings
from clusterlaunch.transport.suspension import SuspendWatch

# OpenSSH's own session window (CHAN_SES_WINDOW_DEFAULT). A larger one let sshd queue up
# to 16 MiB for a controller slower than the job's output, and sshd then spent its CPU
# moving that queue: 10M lines through exec took 1.6-5.5 s (3 of 6 runs over 3 s), and
# 1.6-1.8 s with this window, measured on loopback.
WINDOW = 2 << 20
CHUNK = 1 << 20
CONNECTION_ERRORS = (OSError, EOFError, paramiko.SSHException)
"""What paramiko raises where a connection or channel failed or is gone: a socket's
error, its end of stream (EOFError, from a send too), or a protocol error."""


def close_quietly(closable: paramiko.SSHClient | paramiko.Channel | paramiko.SFTPClient) -> None:
    """Close a paramiko client, channel or SFTP session, whatever state its connection is in.

    A close sends a message: a channel's, and behind a jump host a whole client's (its
    socket is a channel of the jump host's connection). That connection failing raised
    EOFError out of a finished exec (1 of 2,073 tests under load), or in place of the
    error being raised. A failed connection is reported where it is used, not here.
    """
    with contextlib.suppress(*CONNECTION_ERRORS):
        closable.close()


class SshProcess:
    """A command on a paramiko channel."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel
        self._fd = channel.fileno()

    def waitables(self) -> list[int]:
        """paramiko's pipe, set when data, EOF or close arrive.

        Still offered after the channel closed while output is buffered (up
        to the window): otherwise the supervisor, with nothing to
        select on, would sleep between 1 MiB reads (measured: 0.2 s each).
        """
        channel = self._channel
        if not channel.closed:  # the common case, asked of every host on every read round
            return [self._fd]
        # Closed: paramiko buffers a channel's last data before it marks the close.
        return [self._fd] if channel.recv_ready() or channel.recv_stderr_ready() else []

    def read(self) -> tuple[bytes, bytes]:
        """Buffered stdout and stderr bytes."""
        channel = self._channel
        out = channel.recv(CHUNK) if channel.recv_ready() else b""
        err = channel.recv_stderr(CHUNK) if channel.recv_stderr_ready() else b""
        if not out and not err and (channel.eof_received or channel.closed):
            # Clear paramiko's "readable" pipe once everything is consumed.
            channel.recv(CHUNK)
        return out, err

    def send(self, data: bytes) -> bool:
        """Write to stdin; False once the channel is gone."""
        try:
            self._channel.sendall(data)
        except CONNECTION_ERRORS:
            return False
        return True

    def close_stdin(self) -> None:
        """EOF on the remote stdin."""
        with contextlib.suppress(*CONNECTION_ERRORS):
            self._channel.shutdown_write()

    def exit_status(self) -> int | None:
        """The remote exit status once the server sent it (None if it never did)."""
        if not self._channel.exit_status_ready():
            return None
        status = self._channel.recv_exit_status()
        # paramiko reports -1 for a channel that closed without an exit status
        # (the connection dropped, or the server sent only exit-signal).
        return None if status == -1 else status

    def finished(self) -> bool:
        """Exit status received and both streams read to the end."""
        channel = self._channel
        # The end first: paramiko's thread buffers the last data before it marks
        # EOF or close, so a buffer found empty after that is empty for good.
        ended = channel.closed or (bool(channel.eof_received) and channel.exit_status_ready())
        return ended and not channel.recv_ready() and not channel.recv_stderr_ready()

    def close(self) -> None:
        """Close the channel (the remote side sees EOF)."""
        close_quietly(self._channel)


class SshConnection:
    """One authenticated SSH connection, with a keepalive that notices dead peers.

    paramiko's own keepalive sends packets without waiting for answers, so a
    silent partition is never noticed; here the server is asked for a reply
    every ``keepalive_interval`` (:mod:`~clusterlaunch.transport.keepalive`: one
    thread for every connection of a run) and the host counts as lost when
    nothing came for ``dead_after`` seconds. As with OpenSSH's
    ServerAliveInterval, a server whose data arrived within the interval is not
    asked: anything it sends proves it alive, the replies included (the socket
    under the connection notes its reads:
    :func:`~clusterlaunch.transport.sshsocket.last_read`).

    Nor is a connection on which nothing runs (no open session or SFTP
    channel): only a running command's host can be lost (the supervisor asks
    :meth:`alive` of those alone), and a finished one's next command fails on
    its own. An ``exec`` on 256 hosts here keeps most of them idle, connected
    before their command or done after it, for ~10 s: ~0.3 ms of controller CPU
    per answered request among 256 connections' threads, a second per host.
    """

    def __init__(
        self,
        target: SshTarget,
        clients: list[paramiko.SSHClient],
        settings: SshSettings,
        on_close: Callable[[], None] | None = None,
        awake: SuspendWatch | None = None,
    ) -> None:
        """``awake``: the command's :class:`SuspendWatch`."""
        self.host = target.alias
        self._clients = clients  # the target's client last, jump hosts before it
        self._settings = settings
        self._on_close = on_close  # releases a shared jump host
        self._awake = awake or SuspendWatch()
        # What ssh asks of every session before its command, from the host's SSH config:
        # SendEnv/SetEnv ("env" requests, without a reply) and ForwardAgent.
        self._environment = target.sent_environment(os.environ)
        self._forward_agent = target.forward_agent
        self._last_answer = time.monotonic()
        self._closed = threading.Event()
        self._keepalives: keepalive.KeepaliveLoop | None = None
        self._channels: list[paramiko.Channel] = []  # what ran here: busy while one is open
        self._opening = 0  # channels being opened: busy too (a lost host never answers one)
        self._opening_lock = threading.Lock()

    @property
    def _transport(self) -> paramiko.Transport:
        transport = self._clients[-1].get_transport()
        if transport is None:
            raise TransportError(self.host, "connection closed")
        return transport

    def start_keepalive(self, loop: keepalive.KeepaliveLoop | None = None) -> None:
        """Begin answered-keepalive checks (call once), in ``loop`` or a loop of its own."""
        self._keepalives = loop or keepalive.KeepaliveLoop(self._settings.keepalive_interval)
        self._keepalives.add(self._keepalive_round)

    def _keepalive_round(self) -> None:
        """Note what the server sent since the last round; ask it if it has been silent.

        Silent is half an interval: the answer to the last round's request
        arrives just after that round, and a whole interval would leave every
        other round unasked (the last answer up to two intervals old, not one).
        """
        now = time.monotonic()
        if not self._busy():
            self._last_answer = now  # idle: its silence is not counted
            return
        try:
            transport = self._transport
            heard = sshsocket.last_read(transport.sock)
            if heard is not None:
                self._last_answer = max(self._last_answer, heard)
            if now - self._last_answer >= self._settings.keepalive_interval / 2:
                keepalive.ask(transport)
        except (TransportError, *CONNECTION_ERRORS):
            return  # gone: alive() says so

    def _busy(self) -> bool:
        """Whether a command or SFTP session is open here (read by the keepalive thread)."""
        opening = self._opening > 0
        return opening or any(not channel.closed for channel in list(self._channels))

    def alive(self) -> bool:
        """Connected, and the peer answered recently. Its silence is not judged for a while
        after this controller was suspended: it was ours (keepalives unsent, answers unread)."""
        try:
            active = self._transport.is_active()
        except TransportError:
            return False
        if not self._awake():
            return active
        silent = time.monotonic() - self._last_answer
        return active and silent < self._settings.dead_after

    def start(self, command: str, stdin: bytes = b"") -> SshProcess:
        """Open a session channel, exec ``command``, write ``stdin``.

        paramiko waits up to an hour for the channel to open and for ever for the
        exec's answer: on a host that stopped answering, only the caller can give up
        (``readloop.start_all``, when :meth:`alive` says so; keepalives are asked
        meanwhile) or :meth:`close` end the wait.
        """
        with self._opening_lock:
            self._opening += 1
        try:
            return self._start(command, stdin)
        finally:
            with self._opening_lock:
                self._opening -= 1

    def _start(self, command: str, stdin: bytes) -> SshProcess:
        try:
            channel = self._transport.open_session(window_size=WINDOW, max_packet_size=1 << 15)
            self._channels.append(channel)
            if self._environment:
                channel.update_environment(self._environment)
            if self._forward_agent:  # the agent $SSH_AUTH_SOCK names, as ssh forwards it
                paramiko.agent.AgentRequestHandler(channel)
            line, sent = for_login_shell(command, stdin)
            channel.exec_command(line)
            channel.sendall(sent)
        except CONNECTION_ERRORS as exc:
            raise TransportError(self.host, f"cannot start a command: {exc}") from None
        return SshProcess(channel)

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP session on this connection (``--sync`` without rsync)."""
        try:
            sftp = paramiko.SFTPClient.from_transport(self._transport, window_size=WINDOW)
        except CONNECTION_ERRORS as exc:
            raise TransportError(self.host, f"cannot open SFTP: {exc}") from None
        if sftp is None:
            raise TransportError(self.host, "cannot open SFTP: no channel")
        channel = sftp.get_channel()
        if channel is not None:
            self._channels.append(channel)
        return sftp

    def close(self) -> None:
        """Close the target's connection, then the jump hosts' (a shared one when unused)."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._keepalives is not None:
            self._keepalives.discard(self._keepalive_round)
        for client in reversed(self._clients):
            close_quietly(client)
        if self._on_close is not None:
            self._on_close()
