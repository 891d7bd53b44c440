"""Text and JSON views of plans, preflight results and outcomes. Pure: strings out."""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clusterlaunch.core.cells import columns, cut, pad
from clusterlaunch.core.errors import HostProblem, JobOutcome
from clusterlaunch.core.hostport import host_port
from clusterlaunch.core.model import JobPlan, NodePlan
from clusterlaunch.core.torchrunargs import user_command

if TYPE_CHECKING:  # exec renders no report, and importing them cost its start 3 ms
    from clusterlaunch.core.reports import KillReport, PreflightResult, RemoteJob, Unanswered


def rank_ranges(ranks: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    parts: list[str] = []
    start = previous = None
    for rank in ranks:
        if previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(_span(start, previous))
        start = previous = rank
    if start is not None:
        parts.append(_span(start, previous))
    return ",".join(parts)


def _span(start: int, end: int | None) -> str:
    return str(start) if end in (None, start) else f"{start}-{end}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain left-aligned text table, its columns in line on a terminal whatever a cell
    holds: each cell escaped here, as the console would (a host's ``\\x1b`` is four cells
    wide, not one), then measured in terminal cells (a CJK character two, a mark none)."""
    cells = [
        [printable(str(c)) for c in headers],
        *[[printable(str(c)) for c in row] for row in rows],
    ]
    widths = [max(columns(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(pad(cell, widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def job_line(plan: JobPlan) -> str:
    """``job ID: N host(s), world size W, master ADDR:PORT``: the dry run's header, and the
    line a launch prints (and logs) once the preflight has resolved every ``auto``."""
    port = str(plan.master_port) if plan.master_port is not None else "AUTO"
    world = plan.world_size if plan.world_size is not None else "auto"
    return (
        f"job {plan.job_id}: {len(plan.nodes)} host(s), world size {world}, "
        f"master {host_port(plan.master_addr, port)}"
    )


def plan_text(plan: JobPlan, *, torchrun: bool = True) -> str:
    """The dry-run view: rank table, then each host's exact command. ``exec`` (not
    ``torchrun``) runs one command a host: no ranks, world size or master port to show."""
    if torchrun:
        header = job_line(plan)
        if plan.master_port is None:
            header += " (auto: a free port is chosen on node 0 at launch)"
    else:
        header = f"job {plan.job_id}: {len(plan.nodes)} host(s), one command each"
    notes = [f"# {note}" for note in plan_notes(plan, torchrun)]
    parts = [header, *notes, "", _node_table(plan, torchrun), ""]
    for node in plan.nodes:
        parts.append(f"# node {node.node_rank} ({node.host}):")
        parts.append(node.command)
        parts.append("")
    return "\n".join(parts)


def plan_notes(plan: JobPlan, torchrun: bool) -> list[str]:
    """What the plan leaves open or the command line changed: the same in text and JSON."""
    notes = list(plan.notes)
    if plan.world_size is None and torchrun:
        notes.append(
            "gpus: auto: each host's process count is its accelerator count, "
            "resolved at launch by the preflight"
        )
    return notes


def _node_table(plan: JobPlan, torchrun: bool) -> str:
    """One row a node; ``exec``'s without process counts and ranks, which it has none of."""
    nodes = plan.nodes
    columns: dict[str, list[object]] = {
        "node": [n.node_rank for n in nodes],
        "host": [n.host for n in nodes],
        "addr": [n.addr for n in nodes],
    }
    if torchrun:
        columns["nproc"] = [_count(n.nproc) for n in nodes]
    if any(n.devices is not None for n in nodes):
        columns["devices"] = [
            ",".join(map(str, n.devices)) if n.devices is not None else "all" for n in nodes
        ]
    if torchrun:
        columns["ranks"] = [_ranks(n) for n in nodes]
    columns["workdir"] = [n.workdir for n in nodes]
    return table(list(columns), list(zip(*columns.values(), strict=True)))


def _ranks(node: NodePlan) -> str:
    return rank_ranges(node.global_ranks) or "auto"  # no ranks: gpus: auto, unresolved


def _count(value: int | None) -> object:
    return "auto" if value is None else value


def plan_json(
    plan: JobPlan, extra: Mapping[str, Any] | None = None, *, torchrun: bool = True
) -> str:
    """The dry-run plan as JSON (the documented contract), with ``extra`` top-level fields."""
    data: dict[str, Any] = {
        "job_id": plan.job_id,
        "world_size": _count(plan.world_size),
        "master_addr": plan.master_addr,
        "master_port": plan.master_port if plan.master_port is not None else "auto",
        "notes": plan_notes(plan, torchrun),
        "nodes": [
            {
                "node_rank": node.node_rank,
                "host": node.host,
                "addr": node.addr,
                "nproc": _count(node.nproc),
                "global_ranks": list(node.global_ranks) or None,
                "devices": list(node.devices) if node.devices is not None else None,
                "accelerator": node.accelerator,
                "env": dict(node.env),
                "command": node.command,
            }
            for node in plan.nodes
        ],
    }
    data.update(extra or {})
    return json.dumps(data, indent=2)


def preflight_text(result: PreflightResult) -> str:
    """One row per host: what the probe found and what failed."""
    rows = []
    for report in result.reports:
        static = report.static
        gpus = static.get("gpus", "-")
        rows.append(
            (
                report.node.node_rank,
                report.node.host,
                static.get("python", "-"),
                static.get("torch") or "-",
                _gpus_cell(gpus, static.get("accelerator")),
                "ok" if report.connected else "FAIL",
                "; ".join(report.problems) or "ok",
            )
        )
    port = result.master_port if result.master_port is not None else "-"
    body = table(("node", "host", "python", "torch", "gpus", f"master:{port}", "status"), rows)
    return body


def _gpus_cell(gpus: object, accelerator: object = None) -> object:
    """What the probe said about GPUs: none (a CPU host), a count, an error, or not probed."""
    if gpus is None:
        return "cpu"
    if isinstance(gpus, list):
        return f"{len(gpus)} {accelerator}" if accelerator not in (None, "cuda") else len(gpus)
    return "error" if isinstance(gpus, dict) else "-"


def problems_text(problems: Sequence[HostProblem]) -> str:
    """Connection failures, one row per host."""
    return table(("host", "check", "problem"), [(p.host, p.check, p.detail) for p in problems])


def outcome_text(outcome: JobOutcome) -> str:
    """The failure summary: what failed first, and its last lines of output."""
    verb = "stopped" if outcome.stopped else "failed"
    lines = [f"job {verb}: {outcome.reason}"]
    if outcome.tail:
        who = f"rank {outcome.rank}" if outcome.rank is not None else outcome.host
        lines.append(f"last {len(outcome.tail)} line(s) of {who}:")
        lines.extend(f"  | {line}" for line in outcome.tail)
    return "\n".join(lines)


def jobs_text(found: Sequence[RemoteJob], unanswered: Sequence[Unanswered] = ()) -> str:
    """``clusterlaunch ps``: one row per node of every running job. "No jobs" only when every
    host answered; else nothing (the hosts that could not be asked are reported as errors)."""
    if not found:
        return "" if unanswered else "no clusterlaunch jobs running on these hosts"
    rows = [
        (
            job.job_id,
            job.host,
            job.node_rank,
            job.attempt,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job.started_at)),
            _command_shown(job),
        )
        for job in found
    ]
    return table(("job", "host", "node", "attempt", "started", "command"), rows)


def _command_shown(job: RemoteJob) -> str:
    """``ps``'s command column: cut short (``--json`` has all of it), escaped."""
    if job.unreadable:  # its agent runs: a job, though its record says nothing more
        return f"(unknown: unreadable record {printable(job.unreadable)})"
    return _short(printable(shlex.join(user_command(job.command))))


def jobs_json(found: Sequence[RemoteJob]) -> str:
    """``clusterlaunch ps --json``: one JSON object per line."""
    return "\n".join(
        json.dumps(
            {
                "job_id": job.job_id,
                "host": job.host,
                "node_rank": job.node_rank,
                "started_at": job.started_at,
                "command": list(job.command),
                "agent_pid": job.agent_pid,
                "attempt": job.attempt,
            }
        )
        for job in found
    )


def kill_text(job_id: str, reports: Sequence[KillReport]) -> str:
    """``clusterlaunch kill``: which nodes stopped, and how long it took. When the job says how
    many nodes it has (its records do), also each node no host had running: ``not found`` (its job's
    controller had stopped it already, once another was killed, or its host was not asked)."""
    rows = [
        (r.node_rank, r.host, "stopped" if r.stopped else "STILL RUNNING", f"{r.seconds:.2f} s")
        for r in reports
    ]
    found = {r.node_rank for r in reports}
    nodes = max((r.nodes or 0 for r in reports), default=0)
    rows += [(rank, "-", "not found", "-") for rank in range(nodes) if rank not in found]
    shown = [(host, rank, state, after) for rank, host, state, after in sorted(rows)]
    return f"job {job_id}:\n" + table(("host", "node", "state", "after"), shown)


def kill_starting_text(job_id: str, hosts: Sequence[str]) -> str:
    """``kill`` of a job still in its preflight on ``hosts``: it does not start."""
    return (
        f"clusterlaunch: job {job_id} was still starting on {', '.join(hosts)}: it will not start"
    )


def kill_missing_text(job_id: str, where: str) -> str:
    """``kill`` found no job ``job_id`` on ``where``: but one still starting there (its
    ``setup:``, a restart's backoff) finds the mark ``kill`` left and does not start."""
    return (
        f"clusterlaunch: no running job {job_id} on {where}; "
        "a job of that id still starting will not start"
    )


def last_lines(output: bytes | str, count: int) -> str:
    """A command's last ``count`` lines of ``output`` on one line, for a one-line error."""
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    return " | ".join(text.strip().splitlines()[-count:])


# C0 and C1 controls and DEL: a newline in a script's name broke ps's table into three
# lines, and an escape sequence in an argument reached the terminal of whoever ran ps.
# A host's text in a message (a setup's or a rank's last lines) could set the terminal's
# title, write its clipboard (OSC 52) or erase the message's own "  | " in front of it.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROLS_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``);
    with ``lines``, its newlines kept (a message of several lines, a table)."""
    controls = _CONTROLS_BUT_NEWLINE if lines else _CONTROLS
    return controls.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)


def _short(text: str, width: int = 80) -> str:
    return cut(text, width, "...")
