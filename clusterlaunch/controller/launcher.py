"""Plan, then apply: connect to every host, sync, preflight, supervise the job.

For ``run`` the preflight is made by the job's own agents, which start the job
on the go (:mod:`clusterlaunch.controller.held`): one session per host.

The pure planner decides everything that can be decided without the network,
once (:func:`make_plan`, called by the command line); this module does the
effectful rest in a fixed order, and nothing starts on any host until every
host has passed every check. The one thing the plan leaves open, ``master_port:
auto``, is filled in from the preflight (:meth:`JobPlan.with_master_port`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from clusterlaunch.controller import logdir
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.joboutput import (
    attempt_logs,
    connection_notes,
    create_attempt_logs,
    make_router,
    notifier,
    open_log_dir,
    preflight_progress,
)
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.request import JobRequest
from clusterlaunch.controller.stall import stall_watch_for, watch_for_stalls
from clusterlaunch.controller.status import StatusLine
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core import accelerators, render
from clusterlaunch.core.checkplan import check_command_sizes
from clusterlaunch.core.errors import JobOutcome, PreflightError, UsageError
from clusterlaunch.core.limits import MAX_RESTARTS
from clusterlaunch.core.model import JobPlan
from clusterlaunch.core.planner import plan_job
from clusterlaunch.core.progress import PHASES, SYNC_PHASES
from clusterlaunch.core.restarts import count_env
from clusterlaunch.remote import program_payload
from clusterlaunch.transport import Connection, close_all, connect_all

if TYPE_CHECKING:
    # The preflight's modules are imported by the commands that probe (check, run): exec
    # never does, and importing them cost its start 7.3 ms (importtime, best of 3).
    from clusterlaunch.controller.held import HeldAgents
    from clusterlaunch.controller.preflight import PreflightResult
    from clusterlaunch.core.syncsource import SourceTree


def make_plan(
    request: JobRequest,
    local_env: Mapping[str, str] | None = None,
    local_cwd: str | None = None,
) -> JobPlan:
    """The plan for ``request``, made once: the dry run, the script check and the launch use it.

    A command too long for the hosts' command lines is refused here, before any
    host is contacted (it used to fail in the preflight, or reset the connection).
    """
    restart = tuple(count_env(request.restart_count).items())  # with --max-restarts only
    plan = plan_job(
        request.inventory,
        request.targets,
        replace(request.options, env=(*request.options.env, *restart)),
        job_id=request.job_id,
        local_env=os.environ if local_env is None else local_env,
        local_cwd=local_cwd or os.getcwd(),
        agent_size=len(program_payload("agent")),
        exec_argv=request.exec_argv,
        local_python=sys.executable,
    )
    # As if the restart count had all its digits: no restart may tip a command over.
    count = request.restart_count
    reserve = 0 if count is None else len(str(MAX_RESTARTS)) - len(str(count))
    options, preflight = request.options, request.exec_argv is None
    check_command_sizes(plan, options.script, options.script_kind, preflight, reserve)
    return plan


def connect(
    request: JobRequest,
    note: Callable[[str], None] | None = None,
    status: StatusLine | None = None,
) -> dict[str, Connection]:
    """Connect to every host; if any fails, close the rest and raise PreflightError.
    ``note`` hears about retried handshakes; ``status`` counts the hosts connected."""
    progress = None if status is None else (lambda alias: status.mark("connected", alias))
    ssh, awake = request.ssh, request.suspensions
    connections, problems = connect_all(
        request.targets, ssh, request.fanout, request.transport, note, progress, awake
    )
    if problems:
        close_all(connections)
        raise PreflightError(problems, render.problems_text(problems))
    return connections


def preflight(
    request: JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console | None = None,
    status: StatusLine | None = None,
) -> PreflightResult:
    """Run the preflight probe on every host (``check``; ``run`` checks with its agents)."""
    from clusterlaunch.controller.preflight import run_preflight

    return run_preflight(
        plan,
        connections,
        request.options.script,
        need_torch=True,
        setup_timeout=request.options.setup_timeout,
        notify=notifier(console, status),
        job_id=plan.job_id,
        fanout=request.fanout,
        script_kind=request.options.script_kind,
        progress=preflight_progress(status),
        awake=request.suspensions,
    )


def hold(
    request: JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console | None = None,
    status: StatusLine | None = None,
    limit: float | None = None,
) -> HeldAgents:
    """``run``'s preflight: every host's agent checks its host and waits for its go.

    The caller sends the go (:meth:`HeldAgents.go`) or closes them. ``limit``: seconds the
    whole preflight may take at most (what ``--timeout`` left a restart).
    """
    from clusterlaunch.controller.held import hold_preflight

    return hold_preflight(
        plan,
        connections,
        request.options.script,
        setup_timeout=request.options.setup_timeout,
        notify=notifier(console, status),
        fanout=request.fanout,
        script_kind=request.options.script_kind,
        progress=preflight_progress(status),
        limit=limit,
        started=request.started,
        awake=request.suspensions,
    )


def check(request: JobRequest, plan: JobPlan, console: Console | None = None) -> PreflightResult:
    """``clusterlaunch check``: connect and preflight ``plan``, start nothing."""
    with request.suspensions.looking():
        connections = connect(request, connection_notes(request, console, None))
        try:
            return preflight(request, plan, connections, console)
        finally:
            close_all(connections)


def launch(
    request: JobRequest, plan: JobPlan, console: Console, source: SourceTree | None = None
) -> JobOutcome:
    """Connect, sync (``--sync``), preflight (torchrun jobs), then supervise ``plan`` to its end."""
    log_dir = open_log_dir(plan, request)  # bad input too: before any host is contacted
    with logdir.closing(log_dir):  # removes the files of a job that never started
        return launch_in(request, console, plan, log_dir, source)


def launch_in(
    request: JobRequest,
    console: Console,
    plan: JobPlan,
    log_dir: LogDir | None,
    source: SourceTree | None = None,
) -> JobOutcome:
    """:func:`launch` with ``log_dir`` open (the restart loop keeps one for all attempts)."""
    if request.sync and source is None:  # scanned before connecting: contacts nothing
        # Only now: sync's imports (pathspec, SFTP) cost 55 ms of every start.
        from clusterlaunch.controller.syncscan import scan_source

        source = scan_source(os.getcwd())
    phases = SYNC_PHASES if request.sync else PHASES
    status = StatusLine(console, [node.host for node in plan.nodes], phases)
    try:
        return _run(request, console, plan, log_dir, source, status)
    finally:
        status.end()  # before any error's lines


def _run(
    request: JobRequest,
    console: Console,
    plan: JobPlan,
    log_dir: LogDir | None,
    source: SourceTree | None,
    status: StatusLine,
) -> JobOutcome:
    connections = connect(request, connection_notes(request, console, log_dir), status)
    status.mark_all("connected")
    held: HeldAgents | None = None
    try:
        if source is not None:
            from clusterlaunch.controller.sync import sync_workdirs

            copied_to, say = partial(status.mark, "synced"), status.say
            ssh, fanout = request.ssh, request.fanout
            sync_workdirs(plan, connections, source, ssh, console, fanout, copied_to, say)
        if request.exec_argv is None:
            held = hold(request, plan, connections, console, status)
            if held.result.problems:
                raise PreflightError(held.result.problems, render.preflight_text(held.result))
            request, plan = resolve(request, plan, held.result, log_dir)
        elif request.job_id_given:  # exec has no preflight: a given id may be running
            from clusterlaunch.controller.jobs import refuse_running_job  # as cli/main.py

            refuse_running_job(request, connections)
        status.mark_all("preflight")
        return supervise(request, plan, connections, console, log_dir, status, held)
    finally:
        if held is not None:
            held.close()  # no go (a failed host, an interrupt): the agents end, nothing starts
        close_all(connections)


def supervise(
    request: JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console,
    log_dir: LogDir | None,
    status: StatusLine | None = None,
    held: HeldAgents | None = None,
) -> JobOutcome:
    """Start ``plan`` on its (connected, preflighted) hosts and supervise it to its end.
    ``held``: the agents that checked the hosts; they start the job on their go."""
    router = make_router(plan, request, console, log_dir, status)
    stalls = stall_watch_for(request, plan, connections)
    try:
        torchrun = request.exec_argv is None
        if torchrun:  # where the job really is, once every auto is resolved
            router.announce(render.job_line(plan))
        supervisor = Supervisor(
            plan,
            connections,
            router,
            timeout=request.timeout,
            timeout_shown=request.timeout_given,
            grace=request.options.grace,
            heartbeat_timeout=request.options.heartbeat_timeout,
            fail_fast=torchrun or request.fail_fast,
            quiet_teardown=torchrun,
            fanout=request.fanout,
            stall_check=watch_for_stalls(stalls, router),
            awake=request.suspensions,
        )
        supervisor.heartbeats.start()  # LimitReached here: nothing started (no go)
        if held is not None:  # the agents checked their hosts: they start the job now
            held.hand_over(plan, supervisor.hosts, router)
        outcome = supervisor.run()
        router.finish(outcome)  # the summary, after any log file given up: console and log
    finally:
        if stalls is not None:
            stalls.abandon(router)  # stacks still being taken: not for a job that has ended
        router.close()
        if log_dir is not None:  # the attempt's files: a restart's ranks write their own
            log_dir.close_files(attempt_logs(plan, request))
    return outcome


def resolve(
    request: JobRequest, plan: JobPlan, result: PreflightResult, log_dir: LogDir | None
) -> tuple[JobRequest, JobPlan]:
    """The request and plan with what the preflight decided: the master port, gpus: auto
    counts and the detected accelerators (so devices: sets the right variable)."""
    port = result.master_port if plan.master_port is None else None
    if not accelerators.needs_resolving(request.inventory):
        # The layout is known: an auto master port is filled in, not re-planned.
        return request, plan if port is None else plan.with_master_port(port)
    # gpus: auto: the rank layout itself comes from the preflight's device counts.
    statics = [report.static for report in result.reports]
    request = replace(request, inventory=accelerators.resolve(request.inventory, statics))
    plan = make_plan(request)
    if port is not None:
        plan = plan.with_master_port(port)
    world = plan.world_size or 0
    if request.rank_filter and max(request.rank_filter) >= world:
        raise UsageError(f"--ranks: gpus: auto gave this job {world} rank(s), 0-{world - 1}")
    if log_dir is not None:  # created now, still before anything starts (as in open_log_dir)
        create_attempt_logs(log_dir, plan, request)
    return request, plan
