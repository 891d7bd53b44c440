"""Transports: how the controller reaches hosts. The only package that imports paramiko.

:func:`connect_all` opens every host's connection in parallel (bounded fan-out)
and reports each host that failed instead of stopping at the first. Two kinds:
``ssh`` (paramiko; ``localhost`` runs locally) and ``srun`` (job steps of the
current Slurm allocation, see :mod:`clusterlaunch.transport.srun`).
"""

from __future__ import annotations

from collections.abc import Sequence

from clusterlaunch.controller.fanout import Failed, run_parallel
from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import HostProblem, TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import srun
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.local import LocalConnection
from clusterlaunch.transport.ssh import POLICIES, SshSettings

TRANSPORTS = ("ssh", "srun")

__all__ = [
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
) -> tuple[dict[str, Connection], list[HostProblem]]:
    """Connect to every target at once; returns the connections and the failures.

    Keyed by the target's alias (the hosts-file destination). With ``srun``
    every target, ``localhost`` included, is a node of the allocation.
    """
    if transport == "srun":
        steps, missing = srun.connect_all(targets)
        return dict(steps), missing
    if transport != "ssh":
        raise ValueError(f"unknown transport {transport!r}")
    from clusterlaunch.transport import hostkeys, ssh

    known_hosts = hostkeys.KnownHosts()

    def open_one(target: SshTarget) -> Connection:
        if target.is_local:
            return LocalConnection()
        return ssh.connect(target, settings, known_hosts)

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
