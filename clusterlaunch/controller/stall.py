"""``run --stall-timeout S``: when no rank has printed for S seconds, show where every worker is.

A hang prints nothing, so silence is the one symptom the controller sees.
The first time the job has been silent for S seconds (counted from the
start: a hang in ``init_process_group`` counts too) the stacks of every worker
are taken with py-spy over the job's own connections and printed once, each
line prefixed like the worker's output; with ``--stall-action kill`` the job
is then torn down and clusterlaunch exits ``ExitStatus.STALLED``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core.errors import JobOutcome, LimitReached
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import JobPlan
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.proclimit import start_thread

if TYPE_CHECKING:  # the stacks' modules load when a stall is found (see cli/doctor.py)
    from concurrent.futures import Future  # imports logging: not for every launch

    from clusterlaunch.controller.request import JobRequest
    from clusterlaunch.core.stacks import StackDump

ABANDON_WAIT_S = 8.0  # a given-up setup's PID line (1 s) and its kill (5 s at most)

Stacks = tuple[list["StackDump"], list[tuple[str, str]]]
TakeStacks = Callable[[JobPlan, Mapping[str, Connection], threading.Event], Stacks]
Background = Callable[[Callable[[], Stacks]], "Future[Stacks]"]


def take_stacks(
    plan: JobPlan, connections: Mapping[str, Connection], give_up: threading.Event
) -> Stacks:
    """Every worker's stack, over the job's connections (py-spy on the hosts)."""
    from clusterlaunch.controller.stacks import stacks_of_plan

    return stacks_of_plan(plan, connections, give_up=give_up)


def on_a_thread(call: Callable[[], Stacks]) -> Future[Stacks]:
    """``call()``'s result, to come from a daemon thread: one still waiting for a host
    must not keep a finished controller from exiting (a pool's threads would)."""
    from concurrent.futures import Future

    future: Future[Stacks] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # handed to the loop, which raises it as before
            future.set_exception(exc)

    start_thread(threading.Thread(target=run, name="stall-stacks", daemon=True))
    return future


class StallWatch:
    """Told of every rank output (:meth:`heard`); :meth:`check` acts once the job has been
    silent too long. Wired by the launcher: the router calls ``heard``, the supervisor's
    loop ``check``."""

    def __init__(
        self,
        timeout: float,
        action: str,
        plan: JobPlan,
        connections: Mapping[str, Connection],
        clock: Callable[[], float] = time.monotonic,
        take: TakeStacks = take_stacks,
        background: Background = on_a_thread,
    ) -> None:
        """``take``: how the stacks are got (over ``connections``; a fake in unit tests);
        ``background``: where ``take`` runs (a thread; at once in unit tests)."""
        self.timeout = timeout
        self.action = action
        self.plan = plan
        self.connections = connections
        self.clock = clock
        self.take = take
        self.background = background
        self.last_output = clock()
        self.fired = False
        self.taking: Future[Stacks] | None = None
        self.give_up = threading.Event()

    def heard(self) -> None:
        """A rank printed something."""
        self.last_output = self.clock()

    def check(self, router: OutputRouter) -> JobOutcome | None:
        """Start taking the stacks once the job is silent for the timeout; print them once
        they are in. The outcome for ``kill``, once printed."""
        if not self.fired and self.clock() - self.last_output >= self.timeout:
            self.fired = True
            router.message(
                f"no rank has printed for {self.timeout:g} s (--stall-timeout): "
                "the Python stack of every worker follows"
            )
            plan, connections, give_up = self.plan, self.connections, self.give_up
            try:
                self.taking = self.background(lambda: self.take(plan, connections, give_up))
            except LimitReached as exc:
                return self._not_taken(router, exc)
        if self.taking is None or not self.taking.done():
            return None
        try:
            dumps, notes = self.taking.result()
        except LimitReached as exc:  # the threads of its fan-out could not start
            return self._not_taken(router, exc)
        finally:
            self.taking = None
        return self._show(router, dumps, notes)

    def _not_taken(self, router: OutputRouter, error: LimitReached) -> JobOutcome | None:
        """The stacks could not be taken: said, and ``kill`` kills all the same."""
        router.message(f"the stacks could not be taken: {error}")
        return self._outcome()

    def abandon(self, router: OutputRouter) -> None:
        """The job has ended: stacks still being taken are given up, and said to be (the
        promised stacks never came, and nothing said why). Waited for a little, so their
        setups are killed while the job's connections are still open."""
        self.give_up.set()
        if self.taking is not None:
            from concurrent.futures import wait

            router.message("the job ended before the stacks were taken: given up")
            wait([self.taking], timeout=ABANDON_WAIT_S)

    def _show(
        self, router: OutputRouter, dumps: list[StackDump], notes: list[tuple[str, str]]
    ) -> JobOutcome | None:
        from clusterlaunch.core.stacks import prefixes_for, stacks_text

        hosts = [node.host for node in self.plan.nodes]
        router.raw_stderr(stacks_text(dumps, notes, prefixes_for(dumps, hosts, color=False)))
        if not dumps and not notes:
            router.message("found neither workers nor torchrun yet (still in setup?)")
        return self._outcome()

    def _outcome(self) -> JobOutcome | None:
        """``--stall-action kill``'s stop, once the stacks were shown (or could not be)."""
        if self.action != "kill":
            return None
        reason = f"no rank printed for {self.timeout:g} s (--stall-timeout, --stall-action kill)"
        return JobOutcome(ExitStatus.STALLED, reason, stopped=True)


def stall_watch_for(
    request: JobRequest, plan: JobPlan, connections: Mapping[str, Connection]
) -> StallWatch | None:
    """The watch ``--stall-timeout`` asks for, if any (``run`` only: exec prints what it prints)."""
    if request.stall_timeout is None or request.exec_argv is not None:
        return None
    return StallWatch(request.stall_timeout, request.stall_action, plan, connections)


def watch_for_stalls(
    watch: StallWatch | None, router: OutputRouter
) -> Callable[[], JobOutcome | None] | None:
    """Connect ``watch`` to ``router``'s rank output; the check for the supervisor's loop."""
    if watch is None:
        return None
    router.on_rank_output = watch.heard
    return lambda: watch.check(router)
