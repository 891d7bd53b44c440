"""The restart loop's smaller parts: its messages, each attempt's request, what it drops.

:mod:`clusterlaunch.controller.restarts` runs the attempts; these helpers keep
that module about the order of things.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from clusterlaunch.controller.console import Console, message_bytes
from clusterlaunch.controller.logdir import LogDir, rank_log, stamp
from clusterlaunch.controller.request import JobRequest
from clusterlaunch.core import render
from clusterlaunch.core import restarts as policy
from clusterlaunch.core.errors import HostProblem, JobOutcome
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import HostSpec, JobPlan, SshTarget

if TYPE_CHECKING:
    from clusterlaunch.core.reports import PreflightResult

Say = Callable[[str], None]


class Ended(Exception):
    """An attempt that could not start, which ends the job (it was counted as a failed
    attempt, and restarted until --max-restarts was used up)."""

    def __init__(self, outcome: JobOutcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


def failed(restart: int, reason: str, status: int, say: Say) -> Ended:
    """Restart ``restart`` could not start: the job fails with ``status``, said once."""
    text = f"restart {restart}: {reason}"
    say(f"job failed: {text}")
    return Ended(JobOutcome(status, text))


def timed_out(given: float | None, restart: int, phase: str, say: Say) -> Ended:
    """``--timeout`` (as the user gave it) ran out while restart ``restart`` was in ``phase``."""
    reason = f"--timeout {given:g} s reached {phase} restart {restart}"
    say(f"job stopped: {reason}")
    return Ended(JobOutcome(ExitStatus.TIMEOUT, reason, stopped=True))


def one_line(problems: Iterable[HostProblem]) -> dict[str, str]:
    """Each host's problem as one line (a sync's detail may hold several)."""
    return {p.host: " | ".join(p.detail.split("\n")).strip() for p in problems}


def bounded(base: JobRequest, left: float | None) -> JobRequest:
    """``base`` with its connect and setup time limits cut to what ``--timeout`` left."""
    if left is None:
        return base
    left = max(left, 0.1)
    ssh = replace(base.ssh, connect_timeout=min(base.ssh.connect_timeout, left))
    setup = min(base.options.setup_timeout, left)
    return replace(base, ssh=ssh, options=replace(base.options, setup_timeout=setup))


def say_ranks_gone(request: JobRequest, world: int, restart: int, say: Say) -> None:
    """A fewer-host attempt has fewer ranks: ``--ranks`` past its world shows nothing of them."""
    gone = sorted(rank for rank in request.rank_filter or () if rank >= world)
    if gone:
        say(
            f"attempt {restart + 1}: --ranks {render.rank_ranges(gone)} not shown: "
            f"this attempt has rank(s) {render.rank_ranges(range(world))}"
        )


def open_rank_logs(plan: JobPlan, restart: int, log_dir: LogDir | None, say: Say) -> None:
    """Each rank of a later attempt writes its own file: say which, create them now, before
    its go (a name taken: UsageError, and the restart does not start)."""
    if log_dir is None:
        return
    log_dir.create(rank_log(rank, restart) for node in plan.nodes for rank in node.global_ranks)
    say(f"attempt {restart + 1}: each rank's output in rank-N.attempt-{restart + 1}.log")


def resume_logs(log_dir: LogDir | None, restart: int, say: Say) -> None:
    """Before restart ``restart``: controller.log, if an attempt gave it up (its disk was
    full, say), is written again from a line that says lines are missing there, and the
    console says so; UsageError if it still cannot be written (the restart does not start:
    it would run with a log that silently misses all its lines)."""
    if log_dir is None:
        return

    def gap(problem: str) -> bytes:
        return message_bytes(f"{stamp()} clusterlaunch: lines are missing here: {problem}\n")

    for path in log_dir.resume(gap):
        say(f"restart {restart}: {path} is written again; lines of attempt {restart} are missing")


def killed_since(result: PreflightResult, started: float) -> bool:
    """Whether some host says ``clusterlaunch kill`` was run for this job since it started
    (``started``: ``time.monotonic()``). Hosts say how long ago, and the span is laid on
    our clock: a host's clock ahead of ours cancelled a restart for a kill of the id made
    just before the job began (a ``kill`` of the old job, then ``run`` again)."""
    return any(
        report.static_at - report.static["killed_ago"] >= started
        for report in result.reports
        if report.static_at is not None and report.static.get("killed_ago") is not None
    )


def request_for(
    base: JobRequest,
    layout: policy.Layout,
    targets: Mapping[str, SshTarget],
    restart: int,
) -> JobRequest:
    """The request for one attempt: its hosts in node-rank order, its restart count."""
    inventory = base.inventory
    master = inventory.master_addr
    if master is not None and master in _gone_names(layout, base.inventory.hosts, targets):
        master = None  # it named a host that is gone: node 0 of this attempt is the master
    return replace(
        base,
        inventory=replace(inventory.narrowed(layout.hosts, "this restart"), master_addr=master),
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


def announcer(console: Console, log_dir: LogDir | None) -> Say:
    """A line for the console's stderr and controller.log, as the job's own messages."""

    def say(text: str) -> None:
        line = message_bytes(f"clusterlaunch: {text}") + b"\n"
        console.err.write(line)
        console.err.flush()
        if log_dir is not None:
            log_dir.write("controller.log", f"{stamp()} ".encode() + line)

    return say
