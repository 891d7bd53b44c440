"""Ending the setups the controller gives up on (see :mod:`clusterlaunch.core.setupguard`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from typing import Protocol, TypeVar

from clusterlaunch.controller.batch import Batch, Finished
from clusterlaunch.core.errors import StopJob
from clusterlaunch.core.setupguard import SetupWatch, kill_command
from clusterlaunch.transport.base import Connection

# How long a program given up on may take to deliver its setup's PID line: the shell
# prints it before the setup starts, so one round trip after the setup is running.
REPORT_WAIT_S = 1.0


def kill_setups(stuck: Sequence[tuple[Connection, SetupWatch]], wait: float = 5.0) -> list[str]:
    """Kill the process group of every setup running and not yet killed; the hosts it was done on.

    Each kill runs on a fresh channel. An interrupt while waiting here closes those
    channels, so the setups of an unanswered batch stay unmarked and the next call
    kills them again (by start time: never another process). A setup whose PID line
    is still on its way has no PID to kill yet: a caller that reads on calls this
    again (each setup is killed once answered), as the supervisor's teardown does.
    """
    jobs, watches = {}, {}
    for connection, watch in stuck:
        if watch.running and watch.pid is not None and not watch.killed:
            jobs[watch.host] = (connection, kill_command(watch.pid, watch.start))
            watches[watch.host] = watch
    if not jobs:
        return []
    # Marked once answered: a second signal that cut this wait short (closing the kills'
    # channels, maybe before a host's shell ran its kill) left setups running until their
    # --setup-timeout when marked before (through GNU timeout: 6 of 6 tries by hand).
    results = Batch(jobs).wait(wait)
    for host in results:
        watches[host].killed = True
    return [host for host, finished in results.items() if finished.status == 0]


class Guarded(Protocol):
    """A host's program behind a guarded setup (the preflight's and doctor's ``ProbeRun``)."""

    connection: Connection

    @property
    def setup(self) -> SetupWatch: ...

    def done(self) -> bool: ...


Run = TypeVar("Run", bound=Guarded)
Pump = Callable[[list[Run], Callable[[Run], bool], float, Callable[[str], None]], None]


def end_setups(runs: list[Run], pump: Pump[Run]) -> None:
    """Kill every setup of ``runs`` still running, its PID line read first if on its way.

    A Ctrl-C can come after a setup started but before its PID line was read:
    killing only the PIDs known then left that setup running until its own
    ``--setup-timeout`` (seen in CI). So ``pump`` (the caller's read loop) reads
    on for at most :data:`REPORT_WAIT_S` while a live program has not reported.
    """

    def reported(run: Run) -> bool:
        return run.done() or run.setup.done or run.setup.pid is not None

    try:
        if not all(reported(run) for run in runs):
            pump(runs, reported, time.monotonic() + REPORT_WAIT_S, lambda line: None)
    except StopJob:
        pass  # a second signal: kill what is known, at once
    finally:
        stuck = [(run.connection, run.setup) for run in runs if not run.done()]
        try:
            kill_setups(stuck)
        except StopJob:  # a second Ctrl-C (a SIGTERM again is dropped): once more, for the rest
            kill_setups(stuck)


def wait_guarded(
    batch: Batch[str],
    timeout: float,
    with_setup: Collection[str],
    enough: Callable[[], bool] = lambda: False,
) -> dict[str, Finished]:
    """``batch.wait(timeout)`` for programs behind setups (``ps``, ``kill``, ``stacks``);
    ``enough()``: stop waiting early (a job ended while its stall stacks were taken).

    The setups of the hosts given up on (timed out, or a Ctrl-C while waiting)
    are killed through :func:`end_setups`, their PID lines still on their way
    read first: :meth:`Batch.wait` closed the channels before that, so such a
    setup ran on until its own ``--setup-timeout``.
    """
    try:
        return batch.wait_open(timeout, enough)
    finally:
        try:
            given_up = [_InBatch(batch, key) for key in with_setup if batch.running(key)]
            end_setups(given_up, _read_batch(batch))
        finally:
            batch.close()


class _InBatch:
    """A batch's command behind a setup, as :func:`end_setups` sees a program (:class:`Guarded`)."""

    def __init__(self, batch: Batch[str], key: str) -> None:
        self.batch = batch
        self.key = key
        self.connection = batch.connection(key)

    @property
    def setup(self) -> SetupWatch:
        """The setup's reports in everything the command printed so far."""
        watch = SetupWatch(self.key, expected=True)
        watch.feed(self.batch.stdout_so_far(self.key))
        return watch

    def done(self) -> bool:
        return not self.batch.running(self.key)


def _read_batch(batch: Batch[str]) -> Pump[_InBatch]:
    """:func:`end_setups`' read loop over ``batch``."""

    def pump(
        runs: list[_InBatch], ready: Callable[[_InBatch], bool], deadline: float, say: object
    ) -> None:
        batch.read_on(deadline - time.monotonic(), lambda: all(ready(run) for run in runs))

    return pump
