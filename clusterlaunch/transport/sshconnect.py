"""Open paramiko connections: ProxyJump (one shared connection per first hop), retries.

Host keys are always checked: ``strict`` refuses unknown keys, ``accept-new`` records an unknown
one in known_hosts, and a *changed* key is refused under both. A handshake the server dropped
(sshd's ``MaxStartups``, a reset) is retried with backoff, a bounded number of times, and so
is an attempt that failed while this controller was suspended (its timers ran on; the server
may have answered in time), those counted apart (``sshfailure.Retries``).
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import paramiko

from clusterlaunch.core.errors import HostKeyError, LimitReached, TransportError
from clusterlaunch.core.hostport import host_port
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import (
    handshake,
    hostkeypolicy,
    hostkeys,
    hostnames,
    paramikofailure,
    sshconfig,
    sshfailure,
    sshoffer,
    sshproxy,
    sshsocket,
)
from clusterlaunch.transport.identities import IdentityFiles, identity_files
from clusterlaunch.transport.keepalive import KeepaliveLoop
from clusterlaunch.transport.settings import SshSettings
from clusterlaunch.transport.ssh import CONNECTION_ERRORS, SshConnection, close_quietly
from clusterlaunch.transport.suspension import SuspendWatch

# paramiko logs a failed connection with a traceback; we report it in one line. Set where
# paramiko first connects: the OpenSSH client never imports logging (4.2 ms of its start).
logging.getLogger("paramiko").addHandler(logging.NullHandler())

IDLE_WAKE_S = 1.0
"""How often paramiko's reader thread wakes on a silent connection (paramiko's own: 0.1 s).
Set on every client this module opens: targets, the hops of a chain, shared jump hosts."""


def connect(
    target: SshTarget,
    settings: SshSettings,
    known_hosts: hostkeys.KnownHosts,
    identities: IdentityFiles,
    jumps: JumpPool | None = None,
    note: Callable[[str], None] | None = None,
    keepalives: KeepaliveLoop | None = None,
    awake: SuspendWatch | None = None,
) -> SshConnection:
    """Authenticate to ``target`` (through its ProxyJump hops), keepalives in ``keepalives``;
    ``awake``: the command's suspension watch (a Ctrl-Z is no server's silence). The first
    hop comes from ``jumps``, shared by every target behind it; later hops (``a,b``) are its own.
    """
    hops = target.proxy_jump.split(",") if target.proxy_jump else []
    pool = jumps if hops else None
    awake = awake or SuspendWatch()
    own = hops[1:] if pool is not None else hops  # the hops this target connects to itself
    chain = [target]
    if own:  # parsed here only for chains: a single hop is the pool's
        config = sshconfig.read_ssh_config(settings.config_path)
        chain = [sshconfig.jump_host(config, hop) for hop in own] + [target]
    previous = None
    if pool is not None:  # the first hop: shared (a failed one fails here, at once)
        previous = pool.acquire(hops[0], target.alias)
    clients: list[paramiko.SSHClient] = []
    try:
        for hop in chain:
            opener = None if previous is None else _opener(previous, hop)
            clients.append(
                _open_client(hop, settings, known_hosts, identities, opener, note, awake)
            )
            previous = clients[-1]
    except BaseException:
        for client in clients:
            close_quietly(client)
        if pool is not None:
            pool.release(hops[0])
        raise
    release = None if pool is None else functools.partial(pool.release, hops[0])
    connection = SshConnection(target, clients, settings, release, awake)
    try:
        connection.start_keepalive(keepalives)
    except LimitReached:  # no thread for keepalives: closed, not left to the sshd
        connection.close()
        raise
    return connection


def _opener(client: paramiko.SSHClient, target: SshTarget) -> Callable[[], sshsocket.TunnelSocket]:
    return lambda: _tunnel(client, target)


def _tunnel(client: paramiko.SSHClient, target: SshTarget) -> sshsocket.TunnelSocket:
    """A TCP stream to ``target`` through an already connected jump host."""
    transport = client.get_transport()
    if transport is None:
        raise TransportError(target.alias, "jump host connection closed")
    try:
        channel = transport.open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0)
        )
    except (OSError, paramiko.SSHException) as exc:
        raise TransportError(
            target.alias, f"jump host cannot reach {host_port(target.hostname, target.port)}: {exc}"
        ) from None
    return sshsocket.TunnelSocket(channel)


def _open_client(
    target: SshTarget,
    settings: SshSettings,
    known_hosts: hostkeys.KnownHosts,
    identities: IdentityFiles,
    opener: Callable[[], sshsocket.TunnelSocket] | None,
    note: Callable[[str], None] | None,
    awake: SuspendWatch,
) -> paramiko.SSHClient:
    """A client authenticated to ``target``, transient handshake failures retried."""
    retries = sshfailure.Retries()
    while True:
        sock: sshsocket.TunnelSocket | paramiko.ProxyCommand | None = None
        if opener is not None:
            sock = opener()
        elif target.proxy_command:
            sock = sshproxy.ProxyProcess(target.proxy_command)
        try:
            return _try_client(target, settings, known_hosts, identities, sock, awake)
        except _Transient as exc:
            again = retries.again(target.alias, exc.detail, exc.ours)
            if again is None:
                raise TransportError(target.alias, exc.detail) from None
            if note is not None:
                note(again[0])
            time.sleep(again[1])


class _Transient(Exception):
    def __init__(self, detail: str, ours: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.ours = ours  # this controller was stopped during the attempt (sshfailure.Retries)


def _try_client(
    target: SshTarget,
    settings: SshSettings,
    known_hosts: hostkeys.KnownHosts,
    identities: IdentityFiles,
    sock: sshsocket.TunnelSocket | paramiko.ProxyCommand | socket.socket | None,
    awake: SuspendWatch,
) -> paramiko.SSHClient:
    client = identities.client(target)
    # paramiko has no public setter for the read-only ("system") key set; the
    # attribute has been there since paramiko 1.x. Shared: parsed once per run.
    client._system_host_keys = known_hosts.keys_for(target)  # type: ignore[attr-defined]
    policy, origin = target.key_policy(settings.host_key_policy)
    if policy == "strict" or not target.known_hosts_files:  # none: nowhere to record, as ssh
        why = origin if target.known_hosts_files else "UserKnownHostsFile none: no file to add to"
        client.set_missing_host_key_policy(hostkeypolicy.StrictPolicy(why))
    else:
        files = target.known_hosts_files
        accept = hostkeypolicy.AcceptNewPolicy(files[0], known_hosts.lock, target.hash_known_hosts)
        client.set_missing_host_key_policy(accept)
    timeout = target.connect_timeout or settings.connect_timeout
    began = time.monotonic()
    try:
        if sock is None:  # a direct connection: our socket, for its options (sshsocket)
            sock = sshsocket.dial_target(target, timeout)
        client.connect(
            # The name paramiko checks known_hosts by (our socket is already connected):
            # lowercased, as ssh checks and records it.
            hostnames.ssh_host_name(target),
            port=target.port,
            username=target.user,
            # paramiko accepts a list here; its type stubs say str only.
            key_filename=identity_files(target) or None,  # type: ignore[arg-type]
            look_for_keys=False,  # its search is not ssh's (identities.identity_files)
            allow_agent=target.use_agent,  # IdentitiesOnly: only configured keys (sshauth)
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            # A TunnelSocket is a Channel but for noting its reads; the stubs know no such.
            sock=sock,  # type: ignore[arg-type]
            transport_factory=handshake.timed_by_deadline(
                sshoffer.transport_factory(target), timeout, awake
            ),
        )
    except HostKeyError:
        close_quietly(client)
        raise
    except paramiko.BadHostKeyException as exc:
        close_quietly(client)
        keys = client._system_host_keys  # type: ignore[attr-defined]
        raise HostKeyError(target.alias, hostkeys.changed_key_message(target, exc, keys)) from None
    except paramiko.AuthenticationException as exc:
        close_quietly(client)
        who = f"{target.user}@" if target.user else ""
        stopped = awake.suspended_since(began)  # "Authentication timeout.": maybe ours
        said = paramikofailure.suspended(
            f"authentication failed for {who}{target.hostname}: {exc}", stopped
        )
        raise (_Transient(said, True) if stopped else TransportError(target.alias, said)) from None
    except RuntimeError:  # paramiko's reader thread could not start (fanout says why)
        close_quietly(client)
        raise
    except CONNECTION_ERRORS as exc:
        waited = time.monotonic() - began >= timeout
        # Before close kills it; not once the timeout passed: its end is then our kill (-15).
        ended = None if waited else sshproxy.proxy_failure(sock, target.proxy_command or "")
        close_quietly(client)
        if ended is not None:  # not the server: the proxy is gone, and says why
            raise TransportError(target.alias, ended) from None
        message = paramikofailure.network_message(target, exc, timeout, waited)
        stopped = awake.suspended_since(began)
        if stopped or paramikofailure.is_transient(exc, waited):
            raise _Transient(paramikofailure.suspended(message, stopped), stopped > 0) from None
        raise TransportError(target.alias, message) from None
    transport = client.get_transport()
    if transport is not None:
        # paramiko's reader thread wakes every 0.1 s only to see whether the
        # connection was closed (close() does not wait for it): at 10 wake-ups a
        # second it was ~45% of a running job's controller CPU (~1 ms per
        # host-second). Data still wakes it at once.
        transport.sock.settimeout(IDLE_WAKE_S)
    return client


@dataclass
class _Shared:
    lock: threading.Lock = field(default_factory=threading.Lock)
    client: paramiko.SSHClient | None = None
    error: TransportError | None = None
    users: int = 0


class JumpPool:
    """One connection per jump host, shared by every target behind it. The first target to
    need a jump host opens it; the others wait for that handshake instead of starting their
    own (64 targets, one bastion login). A jump host that failed fails its targets at once.
    """

    def __init__(
        self,
        settings: SshSettings,
        known_hosts: hostkeys.KnownHosts,
        identities: IdentityFiles,
        note: Callable[[str], None] | None = None,
        awake: SuspendWatch | None = None,
    ) -> None:
        self._settings = settings
        self._awake = awake or SuspendWatch()
        self._known_hosts = known_hosts
        self._identities = identities
        self._note = note
        self._lock = threading.Lock()
        self._shared: dict[str, _Shared] = {}

    def acquire(self, hop: str, alias: str) -> paramiko.SSHClient:
        """The connection to ``hop`` (opened on first use) for target ``alias``."""
        with self._lock:
            shared = self._shared.setdefault(hop, _Shared())
        with shared.lock:
            if shared.client is None and shared.error is None:
                config = sshconfig.read_ssh_config(self._settings.config_path)
                jump = sshconfig.jump_host(config, hop)
                try:
                    shared.client = _open_client(
                        jump, self._settings, self._known_hosts, self._identities, None,
                        self._note, self._awake,
                    )  # fmt: skip
                except TransportError as exc:
                    shared.error = exc
            if shared.error is not None:
                raise TransportError(alias, f"jump host {hop}: {shared.error.detail}")
            assert shared.client is not None
            shared.users += 1
            return shared.client

    def release(self, hop: str) -> None:
        """A target is done with ``hop``; the last one closes it."""
        with self._lock:
            shared = self._shared[hop]
        with shared.lock:
            shared.users -= 1
            if shared.users == 0 and shared.client is not None:
                close_quietly(shared.client)
                shared.client = None
