"""Short commands on many hosts at once, each read to its end: one round trip for all.

Controller logic (what to run where, how long to wait), built on the read loop
of :mod:`clusterlaunch.controller.readloop`: ``--sync``'s checks, ``ps`` and
``kill``'s ``jobctl``, and the kills of stuck setups.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from clusterlaunch.controller.readloop import is_lost, read_round, start_all
from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import HOST_LOST, TransportError
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.suspension import SuspendWatch

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Finished:
    """How one command ended. ``status`` is None when it could not start or timed out."""

    status: int | None
    out: bytes = b""
    err: bytes = b""
    error: str | None = None
    """Why there is no status."""
    started: bool = True
    """False when the command could not even be started on its connection."""


class Batch(Generic[K]):
    """Commands started together (stdin closed at once) and waited for together.

    Starting returns at once, so a batch whose answer is not needed yet (a
    cleanup) can run while the caller does something else.
    """

    def __init__(
        self, jobs: Mapping[K, tuple[Connection, str]], stdin: bytes = b"", fanout: int = FANOUT
    ) -> None:
        """Start every ``(connection, command)``, each fed ``stdin`` and then EOF.

        At most ``fanout`` channels are opened at once.
        """
        self._keys = list(jobs)
        self._connections = {key: connection for key, (connection, _) in jobs.items()}
        self._results: dict[K, Finished] = {}
        self._running: dict[K, RemoteProcess] = {}
        self._outputs: dict[K, tuple[list[bytes], list[bytes]]] = {}
        self._awake = SuspendWatch()
        starts = [(connection, command, stdin) for connection, command in jobs.values()]
        started = start_all(starts, fanout, "batch", self._awake)
        for key, process in zip(self._keys, started, strict=True):
            if isinstance(process, TransportError):
                self._results[key] = Finished(None, error=process.detail, started=False)
                continue
            process.close_stdin()
            self._running[key] = process
            self._outputs[key] = ([], [])

    def wait(self, timeout: float) -> dict[K, Finished]:
        """Every command's end, in the order given; those still running after ``timeout`` lose.

        Their channels are closed on the way out, whatever happens.
        """
        try:
            return self.wait_open(timeout)
        finally:
            self.close()

    def wait_open(
        self, timeout: float, enough: Callable[[], bool] = lambda: False
    ) -> dict[K, Finished]:
        """As :meth:`wait`, but the commands given up on keep their channels.

        So a caller can still read what they had on their way (a setup's PID
        line) with :meth:`read_on`; :meth:`close` drops them.
        """
        self.read_on(timeout, enough)
        for key in self._running:
            out, err = (b"".join(part) for part in self._outputs[key])
            self._results[key] = Finished(None, out, err, f"no answer within {timeout:g} s")
        return {key: self._results[key] for key in self._keys}

    def read_on(self, seconds: float, enough: Callable[[], bool]) -> None:
        """Read until every command ended, ``enough()`` holds, or ``seconds`` passed."""
        deadline = time.monotonic() + seconds
        running = self._running
        while running and not enough() and (left := deadline - time.monotonic()) > 0:
            read_round(list(running.items()), min(left, 0.2), self._take)
            self._give_up_lost()

    def _give_up_lost(self) -> None:
        """End the commands whose host stopped answering: waiting on them waited out the
        whole timeout (and ``ps`` said nothing of why)."""
        for key in [key for key in self._running if is_lost(self._connections[key], self._awake)]:
            out, err = (b"".join(part) for part in self._outputs[key])
            self._results[key] = Finished(None, out, err, HOST_LOST)
            self._running.pop(key).close()

    def running(self, key: K) -> bool:
        """Whether command ``key`` started and has neither ended nor been closed."""
        return key in self._running

    def connection(self, key: K) -> Connection:
        """The connection command ``key`` was given."""
        return self._connections[key]

    def stdout_so_far(self, key: K) -> bytes:
        """What command ``key`` printed on stdout until now (or until it was given up on)."""
        return b"".join(self._outputs[key][0]) if key in self._outputs else b""

    def _take(self, key: K, out: bytes, err: bytes) -> None:
        process = self._running[key]
        self._outputs[key][0].append(out)
        self._outputs[key][1].append(err)
        if process.finished():
            outs, errs = (b"".join(part) for part in self._outputs[key])
            self._results[key] = Finished(process.exit_status(), outs, errs)
            del self._running[key]
            process.close()

    def close(self) -> None:
        """Drop the channels of commands still running (they see EOF, nothing else)."""
        for process in self._running.values():
            process.close()
        self._running.clear()


def run_all(
    jobs: Mapping[K, tuple[Connection, str]], timeout: float, fanout: int = FANOUT
) -> dict[K, Finished]:
    """Start every ``(connection, command)`` and wait for all of them."""
    return Batch(jobs, fanout=fanout).wait(timeout)
