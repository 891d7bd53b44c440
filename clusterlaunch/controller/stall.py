"""``run --stall-timeout S``: when no rank has printed for S seconds, show where every worker is.

A hang prints nothing, so silence is the one symptom the controller sees.
The first time the job has been silent for S seconds (counted from the
start: a hang in ``init_process_group`` counts too) the stacks of every worker
are taken with py-spy over the job's own connections and printed once, each
line prefixed like the worker's output; with ``--stall-action kill`` the job
is then torn down and clusterlaunch exits ``ExitStatus.STALLED``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import JobPlan
from clusterlaunch.transport.base import Connection

if TYPE_CHECKING:  # the stacks' modules load when a stall is found (see cli/doctor.py)
    from clusterlaunch.core.stacks import StackDump

TakeStacks = Callable[
    [JobPlan, Mapping[str, Connection]], tuple[list["StackDump"], list[tuple[str, str]]]
]


def take_stacks(
    plan: JobPlan, connections: Mapping[str, Connection]
) -> tuple[list[StackDump], list[tuple[str, str]]]:
    """Every worker's stack, over the job's connections (py-spy on the hosts)."""
    from clusterlaunch.controller.stacks import stacks_of_plan

    return stacks_of_plan(plan, connections)


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
    ) -> None:
        """``take``: how the stacks are got (over ``connections``; a fake in unit tests)."""
        self.timeout = timeout
        self.action = action
        self.plan = plan
        self.connections = connections
        self.clock = clock
        self.take = take
        self.last_output = clock()
        self.fired = False

    def heard(self) -> None:
        """A rank printed something."""
        self.last_output = self.clock()

    def check(self, router: OutputRouter) -> JobOutcome | None:
        """Dump the stacks once the job is silent for the timeout; the outcome for ``kill``."""
        if self.fired or self.clock() - self.last_output < self.timeout:
            return None
        self.fired = True
        router.message(
            f"no rank has printed for {self.timeout:g} s (--stall-timeout): "
            "the Python stack of every worker follows"
        )
        from clusterlaunch.core.stacks import prefixes_for, stacks_text

        dumps, notes = self.take(self.plan, self.connections)
        hosts = [node.host for node in self.plan.nodes]
        router.raw_stderr(stacks_text(dumps, notes, prefixes_for(dumps, hosts, color=False)))
        if not dumps and not notes:
            router.message("found neither workers nor torchrun yet (still in setup?)")
        if self.action != "kill":
            return None
        reason = f"no rank printed for {self.timeout:g} s (--stall-timeout, --stall-action kill)"
        return JobOutcome(ExitStatus.STALLED, reason, stopped=True)


def watch_for_stalls(
    watch: StallWatch | None, router: OutputRouter
) -> Callable[[], JobOutcome | None] | None:
    """Connect ``watch`` to ``router``'s rank output; the check for the supervisor's loop."""
    if watch is None:
        return None
    router.on_rank_output = watch.heard
    return lambda: watch.check(router)
