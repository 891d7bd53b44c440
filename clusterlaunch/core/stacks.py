"""What ``clusterlaunch stacks`` (and ``run --stall-timeout``) prints: every worker's stack (pure).

Each stack line carries the worker's own output prefix (``[r3 node1:1]``), so
a dump reads like, and sorts with, the job's output.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core.lines import Prefixes


@dataclass(frozen=True)
class StackDump:
    """One worker's stack as py-spy printed it, or why there is none."""

    host: str
    rank: int
    local_rank: int
    pid: int
    text: str | None
    error: str | None = None


def dumps_from_records(records: Iterable[tuple[str, Mapping[str, Any]]]) -> list[StackDump]:
    """``(host, jobctl "stack" record)`` pairs → one dump per worker (first seen wins)."""
    found: dict[tuple[int, int], StackDump] = {}
    for host, record in records:
        if record.get("event") != "stack":
            continue
        dump = StackDump(
            host=host,
            rank=int(record["rank"]),
            local_rank=int(record["local_rank"]),
            pid=int(record["pid"]),
            text=record.get("text"),
            error=record.get("error"),
        )
        found.setdefault((dump.rank, dump.pid), dump)
    return sorted(found.values(), key=lambda d: (d.rank, d.pid))


def notes_from_records(records: Iterable[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, str]]:
    """``(host, why)`` for each host that could not take stacks (py-spy missing)."""
    notes = {host: str(r.get("why")) for host, r in records if r.get("event") == "nostacks"}
    return sorted(notes.items())


def stacks_text(
    dumps: Sequence[StackDump], notes: Sequence[tuple[str, str]], prefixes: Prefixes
) -> bytes:
    """Every worker's stack, each line prefixed like the worker's output; then the notes."""
    out = []
    for dump in dumps:
        prefix = prefixes.rank(dump.rank)
        if dump.error is not None or dump.text is None:
            out.append(prefix + f"(pid {dump.pid}) no stack: {dump.error}".encode())
            continue
        for line in dump.text.rstrip("\n").splitlines():
            out.append(prefix + line.encode("utf-8", "replace"))
    for host, why in notes:
        out.append(prefixes.host(host) + why.encode("utf-8", "replace"))
    return b"".join(line + b"\n" for line in out)


def prefixes_for(dumps: Sequence[StackDump], hosts: Sequence[str], color: bool) -> Prefixes:
    """The prefixes a job of these workers gets (rank, host, local rank)."""
    ranks = sorted({(d.rank, d.host, d.local_rank) for d in dumps})
    return Prefixes(ranks, hosts, color=color)
