"""Preflight: every check on every host in one pass, before anything starts anywhere.

Each host checks itself (``clusterlaunch/remote/checks.py``: the probe for
``check``, the agent itself before its go for ``run``) under the job's own shell
prefix, setup included (bounded, and killed if we give up on the host: see
``setupguard``). Node 0 holds the master port open while every node dials it,
so "the port is free" and "every node can reach master_addr" are tested for real.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Mapping
from functools import partial

from clusterlaunch.controller.probes import ProbeRun, pump_until
from clusterlaunch.controller.readloop import start_all
from clusterlaunch.controller.setups import end_setups
from clusterlaunch.core import accelerators, render, reports
from clusterlaunch.core.checkplan import listen_port, preflight_bound, probe_command
from clusterlaunch.core.defaults import FANOUT, PREFLIGHT_TIMEOUT_S, SETUP_TIMEOUT_S
from clusterlaunch.core.errors import HOST_LOST
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import JobPlan, NodePlan, ScriptKind
from clusterlaunch.core.reports import PreflightResult, compare_torch, host_problems
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.suspension import SuspendWatch


def run_preflight(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    script: str | None,
    need_torch: bool,
    timeout: float = PREFLIGHT_TIMEOUT_S,
    setup_timeout: float = SETUP_TIMEOUT_S,
    notify: Callable[[str], None] | None = None,
    job_id: str | None = None,
    fanout: int = FANOUT,
    script_kind: ScriptKind = "file",
    progress: Callable[[str], None] | None = None,
    awake: SuspendWatch | None = None,
) -> PreflightResult:
    """Probe every host of ``plan``; never raises for a host problem (see ``problems``).

    ``notify`` hears about slow setups; ``job_id`` (torchrun jobs) makes every
    probe look for a job of that id already running and its temp dir taken.
    ``fanout`` probes are started at once; ``progress`` hears of each host done.
    ``awake``: the command's :class:`SuspendWatch` (a Ctrl-Z is no host's silence).
    Whatever way this ends (a signal included), no setup is left running.
    ``run`` checks with its agents instead: :mod:`clusterlaunch.controller.held`.
    """
    payload = program_payload("probe")
    nonce = secrets.token_hex(8)

    def command(node: NodePlan, listen: int | None) -> str:
        return probe_command(
            node,
            plan.master_addr,
            listen,
            nonce,
            script,
            need_torch,
            len(payload),
            setup_timeout,
            job_id,
            script_kind,
        )

    runs = [ProbeRun(node, connections[node.host], script) for node in plan.nodes]
    timeout = preflight_bound(plan, setup_timeout, timeout)
    try:
        master_port = check_hosts(
            plan, runs, command, payload, timeout, notify, fanout, False, progress, awake
        )
    finally:
        for run in runs:
            if run.process is not None:
                run.process.close()
    return judge_all(runs, master_port)


def check_hosts(
    plan: JobPlan,
    runs: list[ProbeRun],
    command: Callable[[NodePlan, int | None], str],
    payload: bytes,
    timeout: float,
    notify: Callable[[str], None] | None,
    fanout: int,
    hold: bool,
    progress: Callable[[str], None] | None = None,
    awake: SuspendWatch | None = None,
) -> int | None:
    """Start ``command`` (with ``payload`` on stdin) on every host and take its checks; the port.

    ``hold``: the programs are agents, which stay to start the job on the go
    (their stdin stays open); probes are told to finish. No setup outlives it
    unless its host's program is still wanted. ``awake``: the command's
    :class:`SuspendWatch`, which the phases after this one share (a new one here
    missed a Ctrl-Z that began before).
    """
    deadline = time.monotonic() + timeout
    awake = awake or SuspendWatch()
    try:
        starts = []
        for run in runs:
            node = run.report.node
            starts.append((run.connection, command(node, listen_port(plan, node)), payload))
        for run, process in zip(runs, start_all(starts, fanout, "probe", awake), strict=True):
            run.started(process)
        return _probe(runs, deadline, notify or (lambda line: None), _once(progress), hold, awake)
    finally:
        end_setups(runs, partial(pump_until, awake=awake))
        for run in runs:
            if run.process is not None:
                run.report.exit_status = run.process.exit_status()


def judge_all(runs: list[ProbeRun], master_port: int | None) -> PreflightResult:
    """Every host's verdict, the torch versions compared across hosts."""
    for run in runs:
        _judge(run)
    compare_torch([run.report for run in runs])
    return PreflightResult([run.report for run in runs], master_port)


def _probe(
    runs: list[ProbeRun],
    deadline: float,
    notify: Callable[[str], None],
    progress: Callable[[ProbeRun], None],
    hold: bool,
    awake: SuspendWatch,
) -> int | None:
    """The probe's three steps on every host; the master port node 0 bound."""

    def pump(stage: str) -> None:
        pump_until(runs, lambda r: stage in r.stages or r.done(), deadline, notify, progress, awake)

    pump("static")
    master_port: int | None = runs[0].stages.get("static", {}).get("port")
    port_line = f"{master_port or ''}\n".encode()
    for run in runs:
        run.send(port_line)
    if master_port is not None:
        pump("connect")
        runs[0].send(b"done\n")
    # else node 0 bound nothing (port taken, or no report): no host can dial it, and
    # waiting for their checks held the error back for the 60 s preflight timeout.
    for run in runs:
        if run.process is not None and not hold:
            run.process.close_stdin()
    # "end" comes after node 0 closed its listener: enough to start torchrun on
    # that port. Waiting for the interpreters to exit as well would add their
    # shutdown to every launch.
    pump("end")
    return master_port


def _once(progress: Callable[[str], None] | None) -> Callable[[ProbeRun], None]:
    """``progress`` of each host, once, when its probe has finished."""
    reported: set[str] = set()

    def heard(run: ProbeRun) -> None:
        host = run.report.node.host
        if progress is not None and host not in reported and ("end" in run.stages or run.done()):
            reported.add(host)
            progress(host)

    return heard


def _judge(run: ProbeRun) -> None:
    report = run.report
    static = run.stages.get("static")
    if run.lost:  # whatever it had reported: its checks were cut short
        report.problems.append(HOST_LOST)
        return
    if static is None:
        report.problems.append(_no_report(run))
        return
    report.static = static
    node = report.node
    if "listen_error" in static:
        report.problems.append(static["listen_error"] + "; choose another master_port or auto")
    connect = run.stages.get("connect")
    if connect is None:
        report.problems.append("did not get to the master connection check")
    elif connect.get("error"):
        report.problems.append(connect["error"])
    else:
        report.connected = True
    # localhost and Slurm steps start from this shell's environment, SSH hosts from their own.
    inherits = getattr(run.connection, "inherits_environment", None)
    report.problems += host_problems(static, os.environ if inherits else (), inherits)
    if static.get("script_found") is False:
        report.problems.append(
            f"script {run.script!r} not found in {static.get('cwd')}; check workdir: and the path"
        )
    if static.get("script_problem"):  # -m or --no-python
        report.problems.append(static["script_problem"])
    report.problems += accelerators.judge(node, static)


def _no_report(run: ProbeRun) -> str:
    status = run.report.exit_status
    tail = render.last_lines(run.report.stderr, 3)
    if run.start_error is not None:
        return f"cannot start the probe: {run.start_error}"
    if run.garbled is not None:
        return f"garbled probe output ({run.garbled}): something else wrote to its stdout"
    if run.setup.timed_out:
        return (
            f"setup did not finish within {run.setup.limit} s and was stopped; "
            "fix setup: or raise --setup-timeout"
        )
    if run.setup.running:
        return reports.setup_failure(status, tail)
    if status == ExitStatus.NOT_STARTED:  # the shell found no such python
        return reports.python_not_found(run.report.node.python, status, tail)
    if status is None:
        return "no answer from the probe before the preflight timeout"
    said = run.report.stderr.decode("utf-8", "replace")
    return reports.shell_failure(run.report.node.python, status, tail, said)
