"""SSH transport on paramiko: connect (with ProxyJump), exec, stream, keepalive.

Host keys are always checked: ``strict`` refuses unknown keys, ``accept-new``
records an unknown key in the user's known_hosts file, and a *changed* key is
refused under both.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from clusterlaunch.core.defaults import CONNECT_TIMEOUT_S
from clusterlaunch.core.errors import HostKeyError, TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import hostkeys, sshconfig

WINDOW = 16 << 20  # a large window lets bulk output flow without round trips
CHUNK = 1 << 20
POLICIES = ("strict", "accept-new")


@dataclass(frozen=True)
class SshSettings:
    """Connection settings shared by every host of a job."""

    host_key_policy: str | None = None
    """strict / accept-new; ``None``: the SSH config's StrictHostKeyChecking, else accept-new."""
    connect_timeout: float = CONNECT_TIMEOUT_S
    keepalive_interval: float = 1.0
    dead_after: float = 6.0
    """A host that answers no keepalive for this long is lost."""
    config_path: str | None = None


class SshProcess:
    """A command on a paramiko channel."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._channel = channel
        self._fd = channel.fileno()

    def waitables(self) -> list[int]:
        """paramiko's pipe, set when data, EOF or close arrive.

        Still offered after the channel closed while output is buffered (up
        to the 16 MiB window): otherwise the supervisor, with nothing to
        select on, would sleep between 1 MiB reads (measured: 0.2 s each).
        """
        channel = self._channel
        buffered = channel.recv_ready() or channel.recv_stderr_ready()
        return [self._fd] if buffered or not channel.closed else []

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
        except (OSError, EOFError, paramiko.SSHException):
            return False
        return True

    def close_stdin(self) -> None:
        """EOF on the remote stdin."""
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
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
        self._channel.close()


class SshConnection:
    """One authenticated SSH connection, with a keepalive that notices dead peers.

    paramiko's own keepalive sends packets without waiting for answers, so a
    silent partition is never noticed; here a thread asks the server for a
    reply every ``keepalive_interval`` and the host counts as lost when none
    came for ``dead_after`` seconds.
    """

    def __init__(self, host: str, clients: list[paramiko.SSHClient], settings: SshSettings) -> None:
        self.host = host
        self._clients = clients  # the target's client last, jump hosts before it
        self._settings = settings
        self._last_answer = time.monotonic()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def _transport(self) -> paramiko.Transport:
        transport = self._clients[-1].get_transport()
        if transport is None:
            raise TransportError(self.host, "connection closed")
        return transport

    def start_keepalive(self) -> None:
        """Begin answering-keepalive checks (call once)."""
        self._thread = threading.Thread(
            target=self._keepalive, name=f"keepalive-{self.host}", daemon=True
        )
        self._thread.start()

    def _keepalive(self) -> None:
        while not self._closed.wait(self._settings.keepalive_interval):
            try:
                transport = self._transport
                # OpenSSH answers unknown global requests with a failure reply:
                # any answer proves the peer is alive. Blocks while it is not.
                transport.global_request("keepalive@openssh.com", wait=True)
            except (TransportError, EOFError, OSError, paramiko.SSHException):
                return
            if not transport.is_active():
                return
            self._last_answer = time.monotonic()

    def alive(self) -> bool:
        """Connected, and the peer answered recently."""
        try:
            active = self._transport.is_active()
        except TransportError:
            return False
        silent = time.monotonic() - self._last_answer
        return active and silent < self._settings.dead_after

    def start(self, command: str, stdin: bytes = b"") -> SshProcess:
        """Open a session channel, exec ``command``, write ``stdin``."""
        try:
            channel = self._transport.open_session(window_size=WINDOW, max_packet_size=1 << 15)
            channel.exec_command(command)
            if stdin:
                channel.sendall(stdin)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise TransportError(self.host, f"cannot start a command: {exc}") from None
        return SshProcess(channel)

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP session on this connection (``--sync`` without rsync)."""
        try:
            sftp = paramiko.SFTPClient.from_transport(self._transport, window_size=WINDOW)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise TransportError(self.host, f"cannot open SFTP: {exc}") from None
        if sftp is None:
            raise TransportError(self.host, "cannot open SFTP: no channel")
        return sftp

    def close(self) -> None:
        """Close the target's connection, then the jump hosts'."""
        self._closed.set()
        for client in reversed(self._clients):
            client.close()


def connect(
    target: SshTarget, settings: SshSettings, known_hosts: hostkeys.KnownHosts
) -> SshConnection:
    """Authenticate to ``target`` (through its ProxyJump hops) and start the keepalive."""
    chain = [target]
    if target.proxy_jump:
        config = sshconfig.load_ssh_config(settings.config_path)
        chain = [sshconfig.jump_host(config, hop) for hop in target.proxy_jump.split(",")]
        chain.append(target)
    clients: list[paramiko.SSHClient] = []
    try:
        sock: paramiko.Channel | None = None
        for index, hop in enumerate(chain):
            client = _open_client(hop, settings, known_hosts, sock)
            clients.append(client)
            if index + 1 < len(chain):
                sock = _tunnel(client, chain[index + 1])
    except BaseException:
        for client in clients:
            client.close()
        raise
    connection = SshConnection(target.alias, clients, settings)
    connection.start_keepalive()
    return connection


def _tunnel(client: paramiko.SSHClient, target: SshTarget) -> paramiko.Channel:
    """A TCP stream to ``target`` through an already connected jump host."""
    transport = client.get_transport()
    if transport is None:
        raise TransportError(target.alias, "jump host connection closed")
    try:
        return transport.open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0)
        )
    except (OSError, paramiko.SSHException) as exc:
        raise TransportError(
            target.alias, f"jump host cannot reach {target.hostname}:{target.port}: {exc}"
        ) from None


def _open_client(
    target: SshTarget,
    settings: SshSettings,
    known_hosts: hostkeys.KnownHosts,
    sock: paramiko.Channel | paramiko.ProxyCommand | None,
) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    # paramiko has no public setter for the read-only ("system") key set; the
    # attribute has been there since paramiko 1.x. Shared: parsed once per run.
    client._system_host_keys = known_hosts.keys_for(target)  # type: ignore[attr-defined]
    if sock is None and target.proxy_command:
        sock = paramiko.ProxyCommand(target.proxy_command)
    policy, origin = target.key_policy(settings.host_key_policy)
    if policy == "strict":
        client.set_missing_host_key_policy(hostkeys.StrictPolicy(origin))
    else:
        files = target.known_hosts_files or (str(Path("~/.ssh/known_hosts").expanduser()),)
        client.set_missing_host_key_policy(hostkeys.AcceptNewPolicy(files[0], known_hosts.lock))
    timeout = target.connect_timeout or settings.connect_timeout
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            # paramiko accepts a list here; its type stubs say str only.
            key_filename=list(target.identity_files) or None,  # type: ignore[arg-type]
            look_for_keys=not target.identities_only,
            allow_agent=not target.identities_only,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            sock=sock,
        )
    except HostKeyError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise HostKeyError(target.alias, hostkeys.changed_key_message(target, exc)) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        who = f"{target.user}@" if target.user else ""
        raise TransportError(
            target.alias, f"authentication failed for {who}{target.hostname}: {exc}"
        ) from None
    except (OSError, EOFError, paramiko.SSHException) as exc:
        client.close()
        raise TransportError(target.alias, _network_message(target, exc, timeout)) from None
    return client


def _network_message(target: SshTarget, exc: BaseException, timeout: float) -> str:
    where = f"{target.hostname}:{target.port}"
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
    if "No existing session" in str(exc) or "Error reading SSH protocol banner" in str(exc):
        via = f" (through ProxyCommand {target.proxy_command!r})" if target.proxy_command else ""
        return f"no SSH handshake with {where}{via}: the server or the proxy did not answer"
    return f"{where}: {exc or type(exc).__name__}"
