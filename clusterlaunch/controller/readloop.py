"""How the controller runs commands on many hosts: start them in parallel, read them in one loop.

The preflight, command batches (:mod:`clusterlaunch.controller.batch`) and the
supervisor all start their commands with :func:`start_all` and read them with
:func:`read_round`, so each concern has one place: how many channel opens run at
once (``--fanout``), and how the controller waits for output.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import TransportError
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.fanout import Failed, run_parallel

K = TypeVar("K")

POLL_S = 0.01
"""With nothing to select on (pipes at their end, the process not yet reaped),
look again this soon: an exit is noticed within 10 ms, not at the next timeout."""


def read_round(
    processes: Sequence[tuple[K, RemoteProcess]],
    timeout: float,
    take: Callable[[K, bytes, bytes], None],
) -> int:
    """Wait until any process has output or has ended (at most ``timeout`` s), then read each.

    ``take(key, stdout, stderr)`` is called for every process, in order, even
    with nothing read, so the caller can judge endings in the same pass.
    Returns the number of bytes read.
    """
    fds = [fd for _, process in processes for fd in process.waitables()]
    if fds:
        select.select(fds, [], [], max(0.0, timeout))
    else:
        time.sleep(max(0.0, min(timeout, POLL_S)))
    moved = 0
    for key, process in processes:
        out, err = process.read()
        moved += len(out) + len(err)
        take(key, out, err)
    return moved


def start_all(
    starts: Sequence[tuple[Connection, str, bytes]], fanout: int = FANOUT, name: str = "start"
) -> list[RemoteProcess | TransportError]:
    """Start every ``(connection, command, stdin)``, at most ``fanout`` channel opens at once.

    Opening a channel costs round trips to the host (open, exec, then stdin),
    so opening them one after another makes a launch as slow as the sum of
    them. Each entry of the result is the process, or the ``TransportError``
    that kept it from starting (a host problem: the caller reports it). Any
    other exception is raised, after closing what did start.
    """

    def start(job: tuple[Connection, str, bytes]) -> RemoteProcess:
        connection, command, stdin = job
        return connection.start(command, stdin)

    results = run_parallel(start, starts, fanout, name)
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
