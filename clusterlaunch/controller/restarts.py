"""Job-level restarts: run an attempt, and after a failure run the job again on the hosts left.

The decisions (restart or not, which hosts, which layout) are pure, in
:mod:`clusterlaunch.core.restarts`; this module applies them. Every attempt
is a whole launch: every host of the hosts file and every spare is connected
and preflighted again, and the job starts again with the same job id, a master
port the preflight found free (``auto``), and ``CLUSTERLAUNCH_RESTART_COUNT``.
Between attempts nothing runs anywhere: the previous attempt's teardown has
ended, so a Ctrl-C in the backoff (a ``StopJob`` from the CLI's one signal
handler) only ends the loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterlaunch.controller import launcher, logdir
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.joboutput import (
    connection_notes,
    make_room_for_logs,
    open_log_dir,
)
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.restartparts import (
    Ended,
    Say,
    announcer,
    bounded,
    failed,
    killed_since,
    one_line,
    open_rank_logs,
    request_for,
    resume_logs,
    say_ranks_gone,
    timed_out,
)
from clusterlaunch.controller.supervisor import KILLED
from clusterlaunch.core import restarts as policy
from clusterlaunch.core.errors import JobOutcome, PreflightError, UsageError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import JobPlan
from clusterlaunch.transport import close_all, connect_all
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.fanout import sleep_in_slices

if TYPE_CHECKING:  # see launcher.py: exec imports no preflight module
    from clusterlaunch.controller.held import HeldAgents
    from clusterlaunch.core.syncsource import SourceTree


def run_job(
    request: launcher.JobRequest,
    plan: JobPlan,
    console: Console,
    source: SourceTree | None = None,
) -> JobOutcome:
    """``clusterlaunch run``: one launch, or with ``--max-restarts`` as many as it takes.

    ``source``: with ``--sync``, the source as the command line checked it (scanned
    again here when not given, and before each later attempt).
    """
    with request.suspensions.looking():  # one watch for every phase and attempt
        if not request.restarts.enabled:
            return launcher.launch(request, plan, console, source)
        log_dir = open_log_dir(plan, request)  # one for every attempt
        with logdir.closing(log_dir):
            return _attempts(request, plan, console, log_dir, source)


def _attempts(
    request: launcher.JobRequest,
    plan: JobPlan,
    console: Console,
    log_dir: LogDir | None,
    source: SourceTree | None = None,
) -> JobOutcome:
    say = announcer(console, log_dir)
    rules = request.restarts
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    started = request.started  # a `clusterlaunch kill` after this cancels the restarts
    # The first attempt is today's launch: any host failing its preflight is bad
    # input or a broken host, reported before anything starts (exit 2).
    outcome = launcher.launch_in(request, console, plan, log_dir, source)
    restarts = 0
    while policy.refusal(outcome, restarts, rules) is None:
        restarts += 1
        try:  # first: the restart's own lines are for controller.log too
            resume_logs(log_dir, restarts, say)
        except UsageError as exc:
            return failed(restarts, str(exc), outcome.exit_code, say).outcome
        wait = policy.backoff_s(rules, restarts)
        say(
            f"attempt {restarts} failed ({outcome.reason}); restart {restarts} of "
            f"{rules.max_restarts} in {wait:g} s"
        )
        # Ctrl-C here raises StopJob: nothing runs anywhere now. --timeout bounds the
        # wait too: a 40 s backoff under --timeout 5 ended the job after 43 s.
        left = _left(deadline)
        sleep_in_slices(wait if left is None else max(0.0, min(wait, left)))
        try:
            _check_time(request, deadline, restarts, "before", say)
            outcome = _restart(request, restarts, console, log_dir, say, started, deadline)
        except Ended as ended:  # too few hosts, --timeout: the job ends, no further restart
            return ended.outcome
        except UsageError as exc:  # not bad input now (exit 2: nothing started): the job ran
            return failed(restarts, str(exc), outcome.exit_code, say).outcome
    if restarts and outcome.exit_code == 0:
        say(f"job succeeded in attempt {restarts + 1} (after {restarts} restart(s))")
    return outcome


def _restart(
    base: launcher.JobRequest,
    restart: int,
    console: Console,
    log_dir: LogDir | None,
    say: Say,
    started: float,
    deadline: float | None = None,
) -> JobOutcome:
    """Attempt ``restart + 1``: connect and preflight every host again, then run on those left.

    ``started`` (monotonic): a ``clusterlaunch kill`` of this job since then, seen
    by any host's preflight, ends the job instead. ``deadline`` (monotonic): where
    ``--timeout`` ends the job, connecting, syncing and preflighting included.
    """
    source = _scan() if base.sync else None  # a file it cannot copy: UsageError, said once
    spares = [spec for spec, _ in base.spares]
    targets = {t.alias: t for t in base.targets} | {t.alias: t for _, t in base.spares}
    limited = bounded(base, _left(deadline))
    connections, problems = connect_all(
        list(targets.values()),
        limited.ssh,
        base.fanout,
        base.transport,
        connection_notes(base, console, log_dir),
        awake=base.suspensions,
    )
    why_not = one_line(problems)
    held: HeldAgents | None = None
    try:
        usable = set(connections)
        while True:
            _check_time(base, deadline, restart, "while connecting for", say)
            layout = policy.choose_layout(
                base.inventory.hosts, spares, usable, base.restarts.min_hosts, why_not
            )
            request = request_for(limited, layout, targets, restart)
            plan = launcher.make_plan(request)
            if held is not None:
                held.close()  # the last layout's agents: none of them gets a go
                held = None
            # Synced before the preflight, which looks for the script: a spare had none.
            failing = _sync(request, plan, connections, console, source) if source else {}
            if not failing:
                held = launcher.hold(request, plan, connections, console, limit=_left(deadline))
                _check_time(base, deadline, restart, "in the preflight of", say)
                if killed_since(held.result, started):
                    say(f"job stopped: {KILLED}, before restart {restart}")
                    return JobOutcome(ExitStatus.KILLED, KILLED, stopped=True)
                failing = {p.host: ("preflight", p.detail) for p in held.result.problems}
            if not failing:
                break
            # A bad node 0 fails everyone's master check: drop it alone, then look again.
            first = plan.nodes[0].host
            dropping = {first: failing[first]} if first in failing else failing
            usable -= set(dropping)
            for host, (step, why) in sorted(dropping.items()):
                why_not[host] = why
                say(f"restart {restart}: {host} failed the {step}, dropped: {why}")
        assert held is not None
        # --ranks was checked against the first attempt; a smaller one names what is gone.
        unfiltered = replace(request, rank_filter=None)
        resolved, plan = launcher.resolve(unfiltered, plan, held.result, log_dir)
        request = replace(resolved, rank_filter=base.rank_filter)
        say(f"attempt {restart + 1}: {policy.layout_text(layout, plan.world_size)}")
        for host, reason in sorted(why_not.items()):
            say(f"attempt {restart + 1}: {host} not used: {reason}")
        say_ranks_gone(request, plan.world_size or 0, restart, say)
        make_room_for_logs(plan, request)  # the last attempt's files are closed
        open_rank_logs(plan, restart, log_dir, say)
        request = replace(request, timeout=_left(deadline), timeout_given=base.timeout)
        return launcher.supervise(request, plan, connections, console, log_dir, held=held)
    except policy.TooFewHosts as exc:
        raise failed(restart, str(exc), ExitStatus.HOST_LOST, say) from None
    finally:
        if held is not None:
            held.close()  # no go: the agents end, nothing starts
        close_all(connections)


def _scan() -> SourceTree:
    from clusterlaunch.controller.syncscan import scan_source

    return scan_source(os.getcwd())


def _sync(
    request: launcher.JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console,
    source: SourceTree,
) -> dict[str, tuple[str, str]]:
    """``--sync`` to this attempt's hosts (those already in step: a quick check each);
    the hosts it failed on, each with why (one line)."""
    from clusterlaunch.controller.sync import sync_workdirs

    try:
        sync_workdirs(plan, connections, source, request.ssh, console, request.fanout)
    except PreflightError as exc:  # SyncError: some host's copy failed
        return {host: ("sync", why) for host, why in one_line(exc.problems).items()}
    return {}


def _check_time(
    base: launcher.JobRequest, deadline: float | None, restart: int, phase: str, say: Say
) -> None:
    left = _left(deadline)
    if left is not None and left <= 0:
        raise timed_out(base.timeout, restart, phase, say)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()
