"""What ``clusterlaunch stacks`` (and ``run --stall-timeout``) prints: every worker's stack (pure).

Each stack line carries the worker's own output prefix (``[r3 node1:1]``), so
a dump reads like, and sorts with, the job's output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.render import printable


@dataclass(frozen=True)
class StackDump:
    """One worker's stack as py-spy printed it, or why there is none."""

    host: str
    rank: int | None
    """None: torchrun itself (the job has no workers yet, or none any more)."""
    local_rank: int | None
    pid: int
    text: str | None
    error: str | None = None


def dumps_from_records(records: Iterable[tuple[str, Mapping[str, Any]]]) -> list[StackDump]:
    """``(host, jobctl "stack" record)`` pairs → one dump per worker (first seen wins)."""
    found: dict[tuple[int | None, int], StackDump] = {}
    for host, record in records:
        if record.get("event") != "stack":
            continue
        rank, local = record.get("rank"), record.get("local_rank")
        dump = StackDump(
            host=host,
            rank=None if rank is None else int(rank),
            local_rank=None if local is None else int(local),
            pid=int(record["pid"]),
            text=record.get("text"),
            error=record.get("error"),
        )
        found.setdefault((dump.rank, dump.pid), dump)  # hosts sharing a machine: once
    return sorted(found.values(), key=_order)


def _order(dump: StackDump) -> tuple[int, str, int]:
    """torchrun dumps (no rank) first, by host; then workers by rank."""
    return (-1 if dump.rank is None else dump.rank, dump.host, dump.pid)


def notes_from_records(records: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """``(host, why)`` for each host that could not take stacks (py-spy missing)."""
    notes = {host: str(r.get("why")) for host, r in records if r.get("event") == "nostacks"}
    return sorted(notes.items())


def stacks_text(
    dumps: Sequence[StackDump], notes: Sequence[tuple[str, str]], prefixes: Prefixes
) -> bytes:
    """Every worker's stack, each line prefixed like the worker's output; then the notes.
    What the host said (a thread's name, a path) has its control characters escaped."""
    out = []
    for dump in dumps:
        if dump.rank is None:
            prefix = prefixes.host(dump.host)
            out.append(prefix + b"torchrun (no workers running):")
        else:
            prefix = prefixes.rank(dump.rank)
        if dump.error is not None or dump.text is None:
            out.append(prefix + _shown(f"(pid {dump.pid}) no stack: {dump.error}"))
            continue
        for line in dump.text.rstrip("\n").splitlines():
            out.append(prefix + _shown(line))
    for host, why in notes:
        out.append(prefixes.host(host) + _shown(why))
    return b"".join(line + b"\n" for line in out)


def _shown(text: str) -> bytes:
    return printable(text).encode("utf-8", "replace")


def prefixes_for(dumps: Sequence[StackDump], hosts: Sequence[str], color: bool) -> Prefixes:
    """The prefixes a job of these workers gets (rank, host, local rank)."""
    ranks = sorted({(d.rank, d.host, d.local_rank or 0) for d in dumps if d.rank is not None})
    return Prefixes(ranks, hosts, color=color)
