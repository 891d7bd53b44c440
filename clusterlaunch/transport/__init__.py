"""Transports: how the controller reaches hosts. The only package that imports paramiko.

:func:`connect_all` opens every host's connection in parallel (bounded fan-out)
and reports each host that failed instead of stopping at the first. Two kinds:
``ssh`` (``localhost`` runs locally) and ``srun`` (job steps of the current
Slurm allocation, see :mod:`clusterlaunch.transport.srun`). ``ssh`` goes
through one of two clients (``--ssh-client``): paramiko, in process
(:mod:`clusterlaunch.transport.ssh`), or the system OpenSSH client, one master
connection per host (:mod:`clusterlaunch.transport.openssh`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import HostProblem, TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import fdlimit, noinvoke, srun  # noqa: F401  (noinvoke: before paramiko)
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.fanout import Failed, run_parallel
from clusterlaunch.transport.local import LocalConnection
from clusterlaunch.transport.settings import CLIENTS, POLICIES, SshSettings
from clusterlaunch.transport.suspension import SuspendWatch

TRANSPORTS = ("ssh", "srun")

__all__ = [
    "CLIENTS",
    "POLICIES",
    "TRANSPORTS",
    "Connection",
    "RemoteProcess",
    "SshSettings",
    "close_all",
    "connect_all",
]


def connect_all(
    targets: Sequence[SshTarget],
    settings: SshSettings,
    fanout: int = FANOUT,
    transport: str = "ssh",
    note: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
    awake: SuspendWatch | None = None,
) -> tuple[dict[str, Connection], list[HostProblem]]:
    """Connect to every target at once; returns the connections and the failures.

    Keyed by the target's alias (the hosts-file destination). With ``srun``
    every target, ``localhost`` included, is a node of the allocation.
    ``note`` hears about retried handshakes (also logged as ``clusterlaunch.connect``);
    ``progress`` hears of each alias connected (paramiko: from the connecting threads;
    OpenSSH: from this thread, as each master's control socket appears).
    A setting the paramiko client cannot honour, or an open-file limit too low
    for this many hosts, raises UsageError before any host is contacted. ``awake``:
    the command's :class:`SuspendWatch` (paramiko's handshakes and keepalives do not
    count a Ctrl-Z of ours against a host).
    """
    fdlimit.ensure_open_files(len(targets))
    if transport == "srun":
        steps, missing = srun.connect_all(targets)
        return dict(steps), missing
    if transport != "ssh":
        raise ValueError(f"unknown transport {transport!r}")

    heard = progress or _ignore

    def noted(line: str) -> None:
        import logging  # here: a note is rare, and logging cost every start 4.2 ms

        logging.getLogger("clusterlaunch.connect").info("%s", line)
        if note is not None:
            note(line)

    local = [target for target in targets if target.is_local]
    remote = [target for target in targets if not target.is_local]
    connections: dict[str, Connection] = {t.alias: LocalConnection() for t in local}
    if settings.client == "openssh":
        from clusterlaunch.transport import sshmaster

        for alias in connections:
            heard(alias)
        found, problems = sshmaster.connect_all(remote, settings, fanout, noted, heard)
        connections.update(found)
        return connections, problems
    awake = awake or SuspendWatch()
    with awake.looking():  # a login that takes a while is no suspension
        return _connect_paramiko(targets, settings, fanout, noted, heard, awake)


def _ignore(alias: str) -> None:
    """No one listens to connection progress."""


def _connect_paramiko(
    targets: Sequence[SshTarget],
    settings: SshSettings,
    fanout: int,
    note: Callable[[str], None],
    progress: Callable[[str], None],
    awake: SuspendWatch,
) -> tuple[dict[str, Connection], list[HostProblem]]:
    from clusterlaunch.transport import hostkeys, sshcompat, sshconnect
    from clusterlaunch.transport.identities import IdentityFiles
    from clusterlaunch.transport.keepalive import KeepaliveLoop

    known_hosts, identities = hostkeys.KnownHosts(), IdentityFiles()  # read once, for all
    sshcompat.check_paramiko_can_connect(targets, settings.config_path, known_hosts)
    jumps = sshconnect.JumpPool(settings, known_hosts, identities, note, awake)
    keepalives = KeepaliveLoop(settings.keepalive_interval)  # one thread for all connections

    def open_one(target: SshTarget) -> Connection:
        if target.is_local:
            connection: Connection = LocalConnection()
        else:
            connection = sshconnect.connect(
                target, settings, known_hosts, identities, jumps, note, keepalives, awake
            )
        progress(target.alias)
        return connection

    connections: dict[str, Connection] = {}
    problems: list[HostProblem] = []
    results = run_parallel(open_one, list(targets), fanout, name="connect")
    for target, result in zip(targets, results, strict=True):
        if not isinstance(result, Failed):
            connections[target.alias] = result
        elif isinstance(result.error, TransportError):
            problems.append(HostProblem(target.alias, "connect", result.error.detail))
        else:
            close_all(connections)
            raise result.error
    return connections, problems


def close_all(connections: dict[str, Connection]) -> None:
    """Close every connection (remote agents see EOF and tear their jobs down)."""
    for connection in connections.values():
        connection.close()
