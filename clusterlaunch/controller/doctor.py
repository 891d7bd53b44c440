"""``clusterlaunch doctor``: run the doctor program on every host and drive its network checks.

Each host runs ``clusterlaunch/remote/doctor.py`` under the job's shell prefix
(read-only: it creates nothing in the workdir). The controller collects every
host's facts and ephemeral port, asks each host for its clock one at a time
(so the round trip bounds the skew), then has every host dial every other
host at once: n·(n−1) checks bounded by the pair timeout. With
``bandwidth``, each ordered pair then sends a fixed number of bytes, one
pair at a time so that links do not share the measurement. What it all
means is decided in :mod:`clusterlaunch.core.doctor`.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.controller.probes import ProbeRun, pump_until
from clusterlaunch.controller.readloop import start_all
from clusterlaunch.controller.setups import end_setups
from clusterlaunch.core import commands, defaults, render, reports
from clusterlaunch.core.bootstrap import could_not_start, too_old_python
from clusterlaunch.core.doctor import HostCheck, clock_skew
from clusterlaunch.core.errors import HOST_LOST, HostProblem
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.model import JobPlan, NodePlan
from clusterlaunch.core.setupguard import OVERDUE_S, SetupGuard
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.fanout import every_result


@dataclass(frozen=True)
class DoctorSettings:
    """How long each part may take, and whether to measure throughput."""

    pair_timeout: float = defaults.DOCTOR_PAIR_TIMEOUT_S
    setup_timeout: float = defaults.SETUP_TIMEOUT_S
    fanout: int = defaults.FANOUT
    bandwidth: bool = False
    tput_bytes: int = defaults.DOCTOR_TPUT_BYTES


@dataclass(frozen=True)
class DoctorResult:
    checks: list[HostCheck]
    throughput: dict[str, dict[str, dict[str, Any]]]
    """``throughput[src][dst]``: ``{"mbps", "seconds", "bytes"}`` or ``{"error"}``."""
    not_started: list[HostProblem] = field(default_factory=list)
    """Hosts where the doctor program never ran (no such python, a failed setup): bad
    input, as ``check`` takes it (exit 2), not a finding about the host."""


def doctor_command(node: NodePlan, master_addr: str, nonce: str, settings: DoctorSettings) -> str:
    """The doctor program for ``node``, under exactly the job's shell prefix."""
    size = len(program_payload("doctor"))
    argv = [
        *commands.bootstrap_argv(node.python, "doctor", size),
        "--master-addr",
        master_addr,
        "--nonce",
        nonce,
        "--timeout",
        f"{settings.pair_timeout:g}",
    ]
    guard = SetupGuard(settings.setup_timeout)
    return commands.shell_command(node.workdir, node.setup, node.env, argv, guard)


def diagnose(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    settings: DoctorSettings,
    notify: Callable[[str], None] | None = None,
) -> DoctorResult:
    """Every host's facts, clock and all-pairs results (and throughput); never raises for a host."""
    nonce = secrets.token_hex(8)
    say = notify or (lambda line: None)
    runs = [ProbeRun(node, connections[node.host], None) for node in plan.nodes]
    budget = defaults.PREFLIGHT_TIMEOUT_S
    if any(node.setup for node in plan.nodes):
        budget += settings.setup_timeout + OVERDUE_S
    code = program_payload("doctor")
    starts = [
        (run.connection, doctor_command(run.report.node, plan.master_addr, nonce, settings), code)
        for run in runs
    ]
    throughput: dict[str, dict[str, dict[str, Any]]] = {}
    skews: dict[str, tuple[float, float]] = {}
    try:
        for run, process in zip(runs, start_all(starts, settings.fanout, "doctor"), strict=True):
            run.started(process)
        pump_until(runs, lambda r: "facts" in r.stages or r.done(), _after(budget), say)
        ready = [run for run in runs if "facts" in run.stages and not run.done()]
        for run in ready:
            skews[run.report.node.host] = _clock(run, say)
        peers = [
            [run.report.node.host, run.report.node.addr, run.stages["facts"]["port"]]
            for run in ready
            if run.stages["facts"].get("port")
        ]
        for run in ready:
            others = [peer for peer in peers if peer[0] != run.report.node.host]
            _command(run, {"do": "pairs", "peers": others})
        wait = settings.pair_timeout + 15
        pump_until(ready, lambda r: "pairs" in r.stages or r.done(), _after(wait), say)
        if settings.bandwidth:
            throughput = _throughput(ready, peers, settings, say)
        for run in runs:
            _command(run, {"do": "done"})
            if run.process is not None:
                run.process.close_stdin()
        pump_until(runs, lambda r: "end" in r.stages or r.done(), _after(10), say)
    finally:
        end_setups(runs, pump_until)
        for run in runs:
            if run.process is not None:
                run.report.exit_status = run.process.exit_status()
                run.process.close()
    where = reached_by_address([run.report.node.addr for run in runs], settings.fanout)
    checks = [_check(run, skews, where) for run in runs]
    return DoctorResult(checks, throughput, _not_started(runs))


def _after(seconds: float) -> float:
    return time.monotonic() + seconds


def _command(run: ProbeRun, command: Mapping[str, Any]) -> None:
    if not run.done():
        run.send(json.dumps(command).encode() + b"\n")


def _clock(run: ProbeRun, say: Callable[[str], None]) -> tuple[float, float]:
    """One host's clock against ours: asked alone, so the round trip is the uncertainty."""
    sent = time.time()
    _command(run, {"do": "clock"})
    pump_until([run], lambda r: "clock" in r.stages or r.done(), _after(10), say)
    received = time.time()
    remote = run.stages.get("clock", {}).get("time")
    return clock_skew(sent, received, float(remote)) if remote is not None else (0.0, -1.0)


def _throughput(
    runs: Sequence[ProbeRun],
    peers: Sequence[Sequence[Any]],
    settings: DoctorSettings,
    say: Callable[[str], None],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Bytes over every ordered pair, one pair at a time: ``result[src][dst]``."""
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        source = run.report.node.host
        for name, addr, port in peers:
            if name == source:
                continue
            stage = f"tput:{name}"
            order = {"do": "tput", "peer": name, "addr": addr, "port": port}
            _command(run, {**order, "bytes": settings.tput_bytes})
            wait = settings.pair_timeout + 60
            pump_until([run], lambda r, s=stage: s in r.stages or r.done(), _after(wait), say)
            result.setdefault(source, {})[name] = run.stages.get(stage, {"error": "no answer"})
    return result


def _check(
    run: ProbeRun,
    skews: Mapping[str, tuple[float, float]],
    where: Mapping[str, tuple[str, ...]],
) -> HostCheck:
    node = run.report.node
    facts = run.stages.get("facts")
    skew = skews.get(node.host)
    return HostCheck(
        host=node.host,
        reached_at=where[node.addr],
        facts=facts,
        problem=None if facts is not None else _why_silent(run),
        skew=skew if skew is not None and skew[1] >= 0 else None,
        pairs=(run.stages.get("pairs") or {}).get("results"),
    )


def reached_by_address(addrs: Sequence[str], fanout: int) -> dict[str, tuple[str, ...]]:
    """:func:`reached_at` for every address, looked up at once (at most ``fanout``): one
    after another, a resolver's delay was paid once per host."""
    unique = list(dict.fromkeys(addrs))
    return dict(zip(unique, every_result(reached_at, unique, fanout, "resolve"), strict=True))


def reached_at(addr: str) -> tuple[str, ...]:
    """The addresses ``addr`` (what peers dial) stands for, as this machine resolves it."""
    try:
        infos = socket.getaddrinfo(addr, None, 0, socket.SOCK_STREAM)
    except OSError:
        return (addr,)
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


def _not_started(runs: Sequence[ProbeRun]) -> list[HostProblem]:
    """The hosts whose doctor program never ran, each with why and the fix."""
    found = []
    for run in runs:
        why = None if "facts" in run.stages else _why_not_started(run)
        if why is not None:
            found.append(HostProblem(run.report.node.host, "doctor", why))
    return found


def _why_not_started(run: ProbeRun) -> str | None:
    """Why the program never ran, as ``check`` says it; None: it ran (and then failed)."""
    status = run.report.exit_status
    tail = render.last_lines(run.report.stderr, 3)
    if run.start_error is not None:
        return f"cannot start the doctor program: {run.start_error}"
    if run.lost:
        return HOST_LOST
    if run.setup.timed_out:
        return (
            f"setup did not finish within {run.setup.limit} s and was stopped; "
            "fix setup: or raise --setup-timeout"
        )
    too_old = too_old_python(tail)
    if too_old is not None:
        return too_old
    if run.setup.running:
        return f"{reports.setup_failure(status, tail)}; fix setup:"
    if status == ExitStatus.NOT_STARTED:  # the shell found no such python
        return reports.python_not_found(run.report.node.python, status, tail)
    return None


def _why_silent(run: ProbeRun) -> str:
    tail = render.last_lines(run.report.stderr, 3)
    if run.start_error is not None:
        return f"cannot start the doctor program: {run.start_error}"
    if run.lost:
        return HOST_LOST
    if run.garbled is not None:
        return f"garbled output ({run.garbled})"
    if run.setup.timed_out:
        return f"setup did not finish within {run.setup.limit} s (--setup-timeout)"
    status = run.report.exit_status
    said = run.report.stderr.decode("utf-8", "replace")  # a Python its environment broke
    broken = None if status is None else could_not_start(run.report.node.python, status, said)
    return broken or f"exit {status}: {tail or 'no output'}"
