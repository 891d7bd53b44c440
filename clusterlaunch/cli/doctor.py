"""``clusterlaunch doctor``, ``clusterlaunch stacks`` and ``run --stall-*``: flags, and running.

``doctor`` reads hosts and connects exactly as ``run`` does (the same
connection and environment flags, the same plan), then runs the doctor
program instead of a job. Its exit status: 0 with no error finding, 1 with
one, 2 for bad input, hosts that cannot be connected to, or hosts where the doctor
program cannot start: no such python, a Python older than 3.8, a failing setup (as
``check``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from clusterlaunch.cli import args as cliargs
from clusterlaunch.cli.slurm import refuse_the_word
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.joboutput import connection_notes
from clusterlaunch.controller.launcher import connect, make_plan
from clusterlaunch.core import defaults, limits, render
from clusterlaunch.core.errors import PreflightError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.transport import close_all, connect_all
from clusterlaunch.transport.sshconfig import resolve_targets

# The doctor's and the stacks' own modules are imported by the commands that use them:
# every other command builds this module's flags, and their dataclasses alone took ~7 ms
# of each start (Python 3.11 compiles each dataclass's methods, ~1 ms a class).


def add_stall_options(run: argparse.ArgumentParser) -> None:
    """``run --stall-timeout S [--stall-action kill]``."""
    run.add_argument(
        "--stall-timeout",
        type=limits.STALL_TIMEOUT,
        metavar="SECONDS",
        help="when no rank has printed for this long, print every worker's Python stack "
        "once (py-spy on the hosts)",
    )
    run.add_argument(
        "--stall-action",
        choices=defaults.STALL_ACTIONS,
        default="stacks",
        help="with --stall-timeout: stacks (default), or kill: stacks, then end the job "
        f"(exit {ExitStatus.STALLED})",
    )


def add_doctor_options(doctor: argparse.ArgumentParser) -> None:
    """Flags only ``doctor`` has (the shared ones are added by cli/parser.py)."""
    doctor.add_argument(
        "--json", dest="report_json", action="store_true", help="every figure as JSON"
    )
    doctor.add_argument(
        "--bandwidth",
        action="store_true",
        help="also run a real all_reduce (1 KiB-64 MiB; algbw, busbw) and a pairwise "
        "TCP throughput matrix",
    )
    doctor.add_argument("hosts", help="hosts file, or slurm")


def run_doctor(args: argparse.Namespace, console: Console) -> int:
    from clusterlaunch.controller.bench import run_all_reduce
    from clusterlaunch.controller.doctor import DoctorSettings, diagnose
    from clusterlaunch.core import doctorview
    from clusterlaunch.core.doctor import Finding, judge

    request = cliargs.job_request(args)
    request = replace(request, exec_argv=("true",))  # plans hosts, addresses and env only
    plan = make_plan(request)
    settings = DoctorSettings(
        setup_timeout=args.setup_timeout, fanout=args.fanout, bandwidth=args.bandwidth
    )
    connections = connect(request, connection_notes(request, console, None))
    try:
        result = diagnose(plan, connections, settings, lambda line: console.say(line))
    finally:
        close_all(connections)
    if result.not_started:  # a wrong python: or setup:, as check reports it (exit 2)
        raise PreflightError(result.not_started, render.problems_text(result.not_started))
    findings = judge(result.checks)
    bench: dict[str, Any] | None = None
    if args.bandwidth and any(finding.level == "error" for finding in findings):
        # A collective across these hosts would hang or fail for the reasons found.
        bench = {"skipped": "not run: fix the errors below first"}
    elif args.bandwidth:
        bench = run_all_reduce(request, [node.python for node in plan.nodes])
        if "error" in bench:
            text = f"{bench['error']}: {' | '.join(bench['tail'])}"
            findings.append(Finding("error", "all hosts", text))
    throughput = result.throughput if args.bandwidth else None
    if args.report_json:  # JSON has escapes of its own
        report = doctorview.doctor_json(result.checks, findings, throughput, bench)
        console.out.write(report.encode() + b"\n")
    else:
        console.show(doctorview.doctor_text(result.checks, findings, throughput, bench))
    errors = any(finding.level == "error" for finding in findings)
    return ExitStatus.FAILED if errors else ExitStatus.OK


def run_stacks(args: argparse.Namespace, console: Console) -> int:
    """``stacks HOSTS JOB_ID``: exit 0 with every worker's stack, 1 with none, 2 for a host
    that could not be asked (as ``kill``)."""
    from clusterlaunch.controller.stacks import stacks_of_job
    from clusterlaunch.core.reports import Unanswered
    from clusterlaunch.core.stacks import prefixes_for, stacks_text

    refuse_the_word(args)
    inventory = load_inventory(args.hosts)
    cliargs.check_env_sizes(inventory.hosts)
    targets = resolve_targets(args.ssh_config, inventory.hosts)
    settings = cliargs.ssh_settings(args, inventory)
    note = (lambda line: console.say(f"clusterlaunch: {line}")) if args.verbose else None
    connections, problems = connect_all(targets, settings, args.fanout, note=note)
    unanswered = [Unanswered(p.host, p.detail) for p in problems]
    reachable = [spec for spec in inventory.hosts if spec.host in connections]
    try:
        dumps, notes, missed = stacks_of_job(
            reachable,
            targets,
            connections,
            args.job_id,
            args.python,
            args.setup_timeout,
            args.fanout,
        )
    finally:
        close_all(connections)
    hosts = [spec.host for spec in inventory.hosts]
    console.out.write(stacks_text(dumps, notes, prefixes_for(dumps, hosts, console.color())))
    for host in unanswered + missed:
        console.say(f"clusterlaunch: error: {host.host}: {render.printable(host.why)}")
    if unanswered or missed:
        return ExitStatus.USAGE
    if not dumps and not notes:
        console.say(f"clusterlaunch: no running workers of job {args.job_id} on these hosts")
        return ExitStatus.FAILED
    return ExitStatus.OK if dumps and all(d.error is None for d in dumps) else ExitStatus.FAILED
