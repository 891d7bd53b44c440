"""How the controller runs commands on many hosts: start them in parallel, read them in one loop.

The preflight, command batches (:mod:`clusterlaunch.controller.batch`) and the
supervisor all start their commands with :func:`start_all` and read them with
:func:`read_round`, so each concern has one place: how many channel opens run at
once (``--fanout``), and how the controller waits for output.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import HOST_LOST, TransportError
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.fanout import Failed, run_parallel
from clusterlaunch.transport.suspension import SuspendWatch

K = TypeVar("K")

POLL_S = 0.01
"""With nothing to select on (pipes at their end, the process not yet reaped),
look again this soon: an exit is noticed within 10 ms, not at the next timeout."""


SWEEP_S = 0.5
"""Every host is looked at (ended? lost?) at least this often; in between, only hosts with
output are read. A sweep costs ~25 µs a host: at 0.2 s it was most of a running job's
controller CPU (~1 ms per host-second)."""


class Sweeps:
    """When a read round must take every process (``everyone``), not only those with output."""

    def __init__(self, every: float = SWEEP_S) -> None:
        self._every = every
        self._last = float("-inf")

    def due(self, now: float) -> bool:
        """True (and counted as done) when the last sweep is ``every`` s old."""
        if now - self._last < self._every:
            return False
        self._last = now
        return True


def read_round(
    processes: Sequence[tuple[K, RemoteProcess]],
    timeout: float,
    take: Callable[[K, bytes, bytes], None],
    everyone: bool = True,
    hold: contextlib.AbstractContextManager[None] | None = None,
) -> int:
    """Wait until any process has output or has ended (at most ``timeout`` s), then read.

    ``take(key, stdout, stderr)`` is called in order for every process when
    ``everyone`` (even with nothing read, so the caller can judge endings and
    liveness in the same pass); otherwise only for those whose waitables are
    ready or that have none left to wait on. Reading every host on every
    wake-up made a launch O(hosts²): 32 hosts woke the loop ~50-110 times
    (1,000-1,700 reads for 32 hosts' few frames each).
    Returns the number of bytes read. ``hold``: entered around each read and its ``take``
    (the supervisor's: a signal's stop waits until ``take`` has the bytes).
    """
    hold = hold or contextlib.nullcontext()
    waits = [(key, process, process.waitables()) for key, process in processes]
    fds = [fd for _, _, mine in waits for fd in mine]
    ready: set[int] = set()
    if fds:
        ready.update(_wait_readable(fds, timeout))
    else:
        time.sleep(max(0.0, min(timeout, POLL_S)))
    moved = 0
    for key, process, mine in waits:
        if not everyone and mine and ready.isdisjoint(mine):
            continue
        with hold:
            out, err = process.read()
            moved += len(out) + len(err)
            take(key, out, err)
    return moved


def _wait_readable(fds: list[int], timeout: float) -> list[int]:
    """The fds that are readable (or hung up) within ``timeout`` s.

    poll, not select: select cannot take an fd numbered 1024 or more, which a
    controller reaches at ~340 hosts (3 fds per paramiko host).
    """
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0, round(timeout * 1000)))]


def start_all(
    starts: Sequence[tuple[Connection, str, bytes]],
    fanout: int = FANOUT,
    name: str = "start",
    awake: Callable[[], bool] | None = None,
) -> list[RemoteProcess | TransportError]:
    """Start every ``(connection, command, stdin)``, at most ``fanout`` channel opens at once.

    Opening a channel costs round trips to the host (open, exec, then stdin),
    so opening them one after another makes a launch as slow as the sum of
    them. Each entry of the result is the process, or the ``TransportError``
    that kept it from starting (a host problem: the caller reports it). Any
    other exception is raised, after closing what did start.

    A start whose host stops answering keepalives is given up on (paramiko waits an
    hour for a channel to open); ``awake`` (the command's :class:`SuspendWatch`) keeps
    our own suspension from counting as the hosts' silence.
    """
    awake = awake or SuspendWatch()

    def start(job: tuple[Connection, str, bytes]) -> RemoteProcess:
        connection, command, stdin = job
        return connection.start(command, stdin)

    def lost(job: tuple[Connection, str, bytes]) -> TransportError | None:
        connection = job[0]
        return TransportError(connection.host, HOST_LOST) if is_lost(connection, awake) else None

    results = run_parallel(start, starts, fanout, name, give_up=lost, late=_close)
    started: list[RemoteProcess | TransportError] = []
    for result in results:
        if not isinstance(result, Failed):
            started.append(result)
        elif isinstance(result.error, TransportError):
            started.append(result.error)
        else:
            for process in results:
                if not isinstance(process, Failed):
                    process.close()
            raise result.error
    return started


def is_lost(connection: Connection, awake: Callable[[], bool]) -> bool:
    """Whether ``connection``'s host stopped answering (asked of a program still running).

    ``awake()`` first: it notes the time, so a suspension of ours is seen before the
    silence it caused is misread (:class:`SuspendWatch`).
    """
    return awake() and not connection.alive()


def _close(process: RemoteProcess) -> None:
    """A program that started after its start was given up on: nobody reads it."""
    process.close()
