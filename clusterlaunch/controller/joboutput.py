"""What the user hears of a job: its output (the console with prefixes, ``--log-dir``'s
files), slow-setup notes and preflight progress, and connection notes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from clusterlaunch.controller.console import Console, message_bytes
from clusterlaunch.controller.logdir import LogDir, rank_log, stamp
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.status import StatusLine
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.model import JobPlan
from clusterlaunch.transport import fdlimit

if TYPE_CHECKING:
    from clusterlaunch.controller.request import JobRequest


def job_ranks(plan: JobPlan, request: JobRequest) -> list[tuple[int, str, int]]:
    return [
        (rank, node.host, local)
        for node in plan.nodes
        for local, rank in enumerate(node.global_ranks)
        if request.exec_argv is None  # exec has hosts, not ranks
    ]


def host_logs(plan: JobPlan, request: JobRequest) -> dict[str, str]:
    """``exec``'s file per host, ``node-N.log`` (its node rank: a name any host makes safe)."""
    if request.exec_argv is None:
        return {}  # a job's hosts print torchrun's own lines: controller.log has them
    return {node.host: f"node-{node.node_rank}.log" for node in plan.nodes}


def attempt_logs(plan: JobPlan, request: JobRequest) -> list[str]:
    """This attempt's files in ``--log-dir``: each rank's (``exec``: each host's). They stay
    open while it runs, and are closed when it ends; ``controller.log`` lasts the job."""
    rank_logs = [rank_log(rank, request.restart_count) for rank, _, _ in job_ranks(plan, request)]
    return [*rank_logs, *host_logs(plan, request).values()]


def make_room_for_logs(plan: JobPlan, request: JobRequest) -> None:
    """The open-file limit raised for this attempt's ``--log-dir`` files and controller.log
    on top of every host's connection, spares included; UsageError naming ``ulimit -Hn``
    when even the hard limit is too low."""
    if request.log_dir:
        hosts = len(request.targets) + len(request.spares)
        fdlimit.ensure_open_files(hosts, files=len(attempt_logs(plan, request)) + 1)


def create_attempt_logs(log_dir: LogDir, plan: JobPlan, request: JobRequest) -> None:
    """This attempt's files created in the open ``log_dir``, room made for them first."""
    make_room_for_logs(plan, request)
    for name in attempt_logs(plan, request):
        log_dir.write(name, b"")


def open_log_dir(plan: JobPlan, request: JobRequest) -> LogDir | None:
    """``--log-dir`` with this job's files created (UsageError if it cannot be)."""
    if not request.log_dir:
        return None
    make_room_for_logs(plan, request)
    log_dir = LogDir(request.log_dir)
    log_dir.open(
        [*attempt_logs(plan, request), "controller.log"], restarts=request.restarts.max_restarts
    )  # later attempts' names too
    return log_dir


def make_router(
    plan: JobPlan,
    request: JobRequest,
    console: Console,
    log_dir: LogDir | None = None,
    status: StatusLine | None = None,
) -> OutputRouter:
    """Console and ``log_dir`` output for ``plan``'s ranks and hosts."""
    ranks = job_ranks(plan, request)
    hosts = [node.host for node in plan.nodes]
    return OutputRouter(
        Prefixes(ranks, hosts, color=console.color()),
        console,
        rank_filter=request.rank_filter,
        log_dir=log_dir,
        plain_prefixes=Prefixes(ranks, hosts, color=False),
        status=status,
        fold_banner=request.exec_argv is None,  # exec prints its command's output as it is
        host_logs=host_logs(plan, request),
        restart_count=request.restart_count,
    )


def notifier(console: Console | None, status: StatusLine | None) -> Callable[[str], None]:
    def notify(line: str) -> None:  # a slow setup: say why nothing happens
        if status is not None:
            status.say(f"clusterlaunch: {line}")
        elif console is not None:
            console.say(f"clusterlaunch: {line}")

    return notify


def preflight_progress(status: StatusLine | None) -> Callable[[str], None] | None:
    return None if status is None else (lambda host: status.mark("preflight", host))


def connection_notes(
    request: JobRequest, console: Console | None, log_dir: LogDir | None
) -> Callable[[str], None]:
    """Where a connection note (a retried handshake) goes: controller.log always, the
    console with ``--verbose`` (worth keeping, not worth a shout)."""
    say = console.say if console is not None and request.verbose else None

    def note(line: str) -> None:
        if log_dir is not None:
            log_dir.write("controller.log", message_bytes(f"{stamp()} clusterlaunch: {line}\n"))
        if say is not None:
            say(f"clusterlaunch: {line}")

    return note
