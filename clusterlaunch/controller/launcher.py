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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.held import HeldAgents, hold_preflight
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.preflight import PreflightResult, run_preflight
from clusterlaunch.controller.stall import StallWatch, watch_for_stalls
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core import accelerators, defaults, render
from clusterlaunch.core.errors import JobOutcome, PreflightError, UsageError
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.model import Inventory, JobPlan, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job
from clusterlaunch.remote import program_source
from clusterlaunch.transport import Connection, SshSettings, close_all, connect_all


@dataclass(frozen=True)
class JobRequest:
    """Everything needed to plan and run one job (``run``) or command (``exec``)."""

    inventory: Inventory
    targets: tuple[SshTarget, ...]
    options: LaunchOptions
    job_id: str
    ssh: SshSettings
    exec_argv: tuple[str, ...] | None = None
    fanout: int = defaults.FANOUT
    timeout: float | None = None
    rank_filter: frozenset[int] | None = None
    log_dir: str | None = None
    fail_fast: bool = False
    """``exec --fail-fast``: stop every host when one fails (torchrun jobs always do)."""
    transport: str = "ssh"
    """``ssh`` or ``srun`` (job steps of the current Slurm allocation)."""
    sync: bool = False
    """``--sync``: copy this directory to every host's workdir before the preflight."""
    verbose: bool = False
    """``--verbose``: connection notes (retried handshakes) on the console too."""
    stall_timeout: float | None = None
    stall_action: str = "stacks"
    """``--stall-timeout``/``--stall-action`` (controller/stall.py)."""


def make_plan(
    request: JobRequest,
    local_env: Mapping[str, str] | None = None,
    local_cwd: str | None = None,
) -> JobPlan:
    """The plan for ``request``, made once: the dry run, the script check and the launch use it."""
    return plan_job(
        request.inventory,
        request.targets,
        request.options,
        job_id=request.job_id,
        local_env=os.environ if local_env is None else local_env,
        local_cwd=local_cwd or os.getcwd(),
        agent_size=len(program_source("agent")),
        exec_argv=request.exec_argv,
        local_python=sys.executable,
    )


def connect(
    request: JobRequest, note: Callable[[str], None] | None = None
) -> dict[str, Connection]:
    """Connect to every host; if any fails, close the rest and raise PreflightError.

    ``note`` hears about retried handshakes.
    """
    connections, problems = connect_all(
        request.targets, request.ssh, request.fanout, request.transport, note
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
) -> PreflightResult:
    """Run the preflight probe on every host (``check``; ``run`` checks with its agents)."""
    return run_preflight(
        plan,
        connections,
        request.options.script,
        need_torch=True,
        setup_timeout=request.options.setup_timeout,
        notify=_notifier(console),
        job_id=plan.job_id,
        fanout=request.fanout,
        script_kind=request.options.script_kind,
    )


def hold(
    request: JobRequest,
    plan: JobPlan,
    connections: Mapping[str, Connection],
    console: Console | None = None,
) -> HeldAgents:
    """``run``'s preflight: every host's agent checks its host and waits for its go.

    The caller sends the go (:meth:`HeldAgents.go`) or closes them.
    """
    return hold_preflight(
        plan,
        connections,
        request.options.script,
        setup_timeout=request.options.setup_timeout,
        notify=_notifier(console),
        fanout=request.fanout,
        script_kind=request.options.script_kind,
    )


def _notifier(console: Console | None) -> Callable[[str], None]:
    def notify(line: str) -> None:
        if console is not None:  # a slow setup: say why nothing happens
            console.err.write(f"clusterlaunch: {line}\n".encode())
            console.err.flush()

    return notify


def check(request: JobRequest, plan: JobPlan, console: Console | None = None) -> PreflightResult:
    """``clusterlaunch check``: connect and preflight ``plan``, start nothing."""
    connections = connect(request, connection_notes(request, console, None))
    try:
        return preflight(request, plan, connections, console)
    finally:
        close_all(connections)


def launch(request: JobRequest, plan: JobPlan, console: Console) -> JobOutcome:
    """Connect, sync (``--sync``), preflight (torchrun jobs), then supervise ``plan`` to its end."""
    log_dir = open_log_dir(plan, request)  # bad input too: before any host is contacted
    try:
        return _launch(request, console, plan, log_dir)
    finally:
        if log_dir is not None:
            log_dir.close()  # idempotent; removes the files of a job that never started


def _launch(
    request: JobRequest, console: Console, plan: JobPlan, log_dir: LogDir | None
) -> JobOutcome:
    # Scanned before connecting: a bad ignore file is bad input, and contacts nothing.
    source = None
    if request.sync:
        # Only now: sync's imports (pathspec, SFTP) cost 55 ms of every start.
        from clusterlaunch.controller.sync import scan_source, sync_workdirs

        source = scan_source(os.getcwd())
    connections = connect(request, connection_notes(request, console, log_dir))
    held: HeldAgents | None = None
    try:
        if source is not None:
            sync_workdirs(plan, connections, source, request.ssh, console, request.fanout)
        if request.exec_argv is None:
            held = hold(request, plan, connections, console)
            if held.result.problems:
                raise PreflightError(held.result.problems, render.preflight_text(held.result))
            request, plan = resolve(request, plan, held.result, log_dir)
        router = make_router(plan, request, console, log_dir)
        try:
            torchrun = request.exec_argv is None
            if torchrun:  # where the job really is, once every auto is resolved
                router.message(render.job_line(plan))
            supervisor = Supervisor(
                plan,
                connections,
                router,
                timeout=request.timeout,
                grace=request.options.grace,
                fail_fast=torchrun or request.fail_fast,
                quiet_teardown=torchrun,
                fanout=request.fanout,
                stall_check=watch_for_stalls(_stall_watch(request, plan, connections), router),
            )
            if held is not None:  # the agents checked their hosts: they start the job now
                held.hand_over(plan, supervisor.hosts, router)
            outcome = supervisor.run()
            if outcome.exit_code != 0:
                router.message(render.outcome_text(outcome))  # console and controller.log
        finally:
            router.close()
        return outcome
    finally:
        if held is not None:
            held.close()  # no go (a failed host, an interrupt): the agents end, nothing starts
        close_all(connections)


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
        for rank, _, _ in _ranks(plan, request):
            log_dir.write(f"rank-{rank}.log", b"")
    return request, plan


def connection_notes(
    request: JobRequest, console: Console | None, log_dir: LogDir | None
) -> Callable[[str], None]:
    """Where a connection note (a retried handshake) goes: controller.log always, the
    console with ``--verbose`` (worth keeping, not worth a shout)."""
    say = console.say if console is not None and request.verbose else None

    def note(line: str) -> None:
        if log_dir is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            log_dir.write("controller.log", f"{stamp} clusterlaunch: {line}\n".encode())
        if say is not None:
            say(f"clusterlaunch: {line}")

    return note


def _stall_watch(
    request: JobRequest, plan: JobPlan, connections: Mapping[str, Connection]
) -> StallWatch | None:
    if request.stall_timeout is None or request.exec_argv is not None:
        return None
    return StallWatch(request.stall_timeout, request.stall_action, plan, connections)


def _ranks(plan: JobPlan, request: JobRequest) -> list[tuple[int, str, int]]:
    return [
        (rank, node.host, local)
        for node in plan.nodes
        for local, rank in enumerate(node.global_ranks)
        if request.exec_argv is None  # exec has hosts, not ranks
    ]


def open_log_dir(plan: JobPlan, request: JobRequest) -> LogDir | None:
    """``--log-dir`` with this job's files created (UsageError if it cannot be)."""
    if not request.log_dir:
        return None
    log_dir = LogDir(request.log_dir)
    log_dir.open([*(f"rank-{rank}.log" for rank, _, _ in _ranks(plan, request)), "controller.log"])
    return log_dir


def make_router(
    plan: JobPlan, request: JobRequest, console: Console, log_dir: LogDir | None = None
) -> OutputRouter:
    """Console and ``log_dir`` output for ``plan``'s ranks and hosts."""
    ranks = _ranks(plan, request)
    hosts = [node.host for node in plan.nodes]
    return OutputRouter(
        Prefixes(ranks, hosts, color=console.color()),
        console,
        rank_filter=request.rank_filter,
        log_dir=log_dir,
        plain_prefixes=Prefixes(ranks, hosts, color=False),
    )
