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
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterlaunch.controller import launcher, logdir
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.joboutput import connection_notes, open_log_dir
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.supervisor import KILLED
from clusterlaunch.core import render
from clusterlaunch.core import restarts as policy
from clusterlaunch.core.errors import JobOutcome, PreflightError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import HostSpec, JobPlan, SshTarget
from clusterlaunch.transport import close_all, connect_all
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.fanout import sleep_in_slices

if TYPE_CHECKING:  # see launcher.py: exec imports no preflight module
    from clusterlaunch.controller.held import HeldAgents
    from clusterlaunch.core.reports import PreflightResult
    from clusterlaunch.core.syncsource import SourceTree

Say = Callable[[str], None]


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
    say = _announcer(console, log_dir)
    rules = request.restarts
    deadline = None if request.timeout is None else time.monotonic() + request.timeout
    started = time.time()  # a `clusterlaunch kill` after this cancels the restarts
    # The first attempt is today's launch: any host failing its preflight is bad
    # input or a broken host, reported before anything starts (exit 2).
    outcome = launcher.launch_in(request, console, plan, log_dir, source)
    restarts = 0
    while policy.refusal(outcome, restarts, rules) is None:
        restarts += 1
        wait = policy.backoff_s(rules, restarts)
        say(
            f"attempt {restarts} failed ({outcome.reason}); restart {restarts} of "
            f"{rules.max_restarts} in {wait:g} s"
        )
        # Ctrl-C here raises StopJob: nothing runs anywhere now. --timeout bounds the
        # wait too: a 40 s backoff under --timeout 5 ended the job after 43 s.
        left = _left(deadline)
        sleep_in_slices(wait if left is None else max(0.0, min(wait, left)))
        left = _left(deadline)
        if left is not None and left <= 0:
            reason = f"--timeout {request.timeout:g} s reached before restart {restarts}"
            say(f"job stopped: {reason}")
            return JobOutcome(ExitStatus.TIMEOUT, reason, stopped=True)
        attempt = replace(request, timeout=left)
        try:
            outcome = _restart(attempt, restarts, console, log_dir, say, started)
        except _Ended as ended:  # too few hosts: the job ends, no further restart
            return ended.outcome
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
) -> JobOutcome:
    """Attempt ``restart + 1``: connect and preflight every host again, then run on those left.

    ``started`` (wall clock): a ``clusterlaunch kill`` of this job since then, seen
    by any host's preflight, ends the job instead.
    """
    spares = [spec for spec, _ in base.spares]
    targets = {t.alias: t for t in base.targets} | {t.alias: t for _, t in base.spares}
    connections, problems = connect_all(
        list(targets.values()),
        base.ssh,
        base.fanout,
        base.transport,
        connection_notes(base, console, log_dir),
    )
    why_not = {p.host: p.detail for p in problems}
    held: HeldAgents | None = None
    try:
        usable = set(connections)
        while True:
            layout = policy.choose_layout(
                base.inventory.hosts, spares, usable, base.restarts.min_hosts, why_not
            )
            request = _request_for(base, layout, targets, restart)
            plan = launcher.make_plan(request)
            if held is not None:
                held.close()  # the last layout's agents: none of them gets a go
            if request.sync:  # before the preflight, which looks for the script: a spare
                _sync(request, plan, connections, console)  # had none, and was dropped
            held = launcher.hold(request, plan, connections, console)
            result = held.result
            if _killed_since(result, started):
                say(f"job stopped: {KILLED}, before restart {restart}")
                return JobOutcome(ExitStatus.KILLED, KILLED, stopped=True)
            failed = {p.host: p.detail for p in result.problems}
            if not failed:
                break
            # A bad node 0 fails everyone's master check: drop it alone, then look again.
            first = plan.nodes[0].host
            dropping = {first: failed[first]} if first in failed else failed
            why_not |= dropping
            usable -= set(dropping)
            for host, why in sorted(dropping.items()):
                say(f"restart {restart}: {host} failed the preflight, dropped: {why}")
        request, plan = launcher.resolve(request, plan, result, log_dir)
        say(f"attempt {restart + 1}: {policy.layout_text(layout, plan.world_size)}")
        for host, reason in sorted(why_not.items()):
            say(f"attempt {restart + 1}: {host} not used: {reason}")
        _say_ranks_gone(request, plan.world_size or 0, restart, say)
        return launcher.supervise(request, plan, connections, console, log_dir, held=held)
    except policy.TooFewHosts as exc:
        raise _Ended(_too_few(restart, str(exc), say)) from None
    except PreflightError as exc:  # --sync failed on a host of this attempt
        text = f"{exc}: {render.problems_text(exc.problems)}"
        raise _Ended(_too_few(restart, text, say)) from None
    finally:
        if held is not None:
            held.close()  # no go: the agents end, nothing starts
        close_all(connections)


def _sync(
    request: launcher.JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console,
) -> None:
    """``--sync`` to this attempt's hosts (those already in step: a quick check each)."""
    from clusterlaunch.controller.sync import sync_workdirs
    from clusterlaunch.controller.syncscan import scan_source

    sync_workdirs(plan, connections, scan_source(os.getcwd()), request.ssh, console, request.fanout)


def _say_ranks_gone(request: launcher.JobRequest, world: int, restart: int, say: Say) -> None:
    """A fewer-host attempt has fewer ranks: ``--ranks`` past its world shows nothing of them."""
    gone = sorted(rank for rank in request.rank_filter or () if rank >= world)
    if gone:
        say(
            f"attempt {restart + 1}: --ranks {render.rank_ranges(gone)} not shown: "
            f"this attempt has rank(s) {render.rank_ranges(range(world))}"
        )


def _killed_since(result: PreflightResult, started: float) -> bool:
    """Whether some host says ``clusterlaunch kill`` was run for this job since it started."""
    times = [report.static.get("killed_at") or 0.0 for report in result.reports]
    return max(times, default=0.0) >= started


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


class _Ended(Exception):
    """An attempt that could not start, which ends the job (it was counted as a failed
    attempt, and restarted until --max-restarts was used up)."""

    def __init__(self, outcome: JobOutcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


def _too_few(restart: int, reason: str, say: Say) -> JobOutcome:
    text = f"restart {restart}: {reason}"
    say(f"job failed: {text}")
    return JobOutcome(ExitStatus.HOST_LOST, text)


def _request_for(
    base: launcher.JobRequest,
    layout: policy.Layout,
    targets: Mapping[str, SshTarget],
    restart: int,
) -> launcher.JobRequest:
    """The request for one attempt: its hosts in node-rank order, its restart count."""
    inventory = base.inventory
    master = inventory.master_addr
    if master is not None and master in _gone_names(layout, base.inventory.hosts, targets):
        master = None  # it named a host that is gone: node 0 of this attempt is the master
    return replace(
        base,
        inventory=replace(inventory, hosts=layout.hosts, master_addr=master),
        targets=tuple(targets[spec.host] for spec in layout.hosts),
        restart_count=restart,
    )


def _gone_names(
    layout: policy.Layout, hosts: tuple[HostSpec, ...], targets: Mapping[str, SshTarget]
) -> set[str]:
    kept = {spec.host for spec in layout.hosts}
    names: set[str] = set()
    for spec in hosts:
        if spec.host not in kept:
            names |= {spec.host, targets[spec.host].hostname, *([spec.addr] if spec.addr else [])}
    return names


def _announcer(console: Console, log_dir: LogDir | None) -> Say:
    """A line for the console's stderr and controller.log, as the job's own messages."""

    def say(text: str) -> None:
        line = f"clusterlaunch: {text}\n"
        console.err.write(line.encode())
        console.err.flush()
        if log_dir is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log_dir.write("controller.log", f"{stamp} {line}".encode())

    return say
