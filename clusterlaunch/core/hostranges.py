"""Host range expansion (``gpu[01-16]``, ``rack[1-2]-n[01-08]``) via ClusterShell.

ClusterShell's NodeSet is the hostlist syntax Slurm users already write; we use
it rather than a hand-written parser. Names without brackets pass through
untouched, so addresses such as ``10.0.0.1`` are never reinterpreted.

NodeSet builds every name of a range (``gpu[1-1000000000]`` ran out of memory),
so a range is counted here first, from its text, and refused above a limit;
and only the syntax documented in docs/hosts-file.md reaches NodeSet (no set
operators, no ``@group`` lookups). NodeSet is imported where it is used: it
loads subprocess, select and threading (for group resolvers we never use), and
the pure core loads no I/O module at import (tests/unit/test_layout.py).
"""

from __future__ import annotations

import re

from clusterlaunch.core.limits import MAX_HOSTS

_RANGE_TEXT = re.compile(r"[A-Za-z0-9._\-\[\],/]+")
_GROUP = re.compile(r"\[([^\[\]]*)\]")
_ITEM = re.compile(r"([0-9]{1,12})(?:-([0-9]{1,12})(?:/([0-9]{1,12}))?)?")
_EXAMPLE = "write ranges like gpu[01-16] or gpu[1-4,7]"


class HostRangeError(ValueError):
    """A host range that cannot be expanded, or would give too many hosts."""


def expand_hosts(pattern: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand ``pattern`` into at most ``limit`` host names, ascending within each range."""
    if "[" not in pattern and "]" not in pattern:
        if limit < 1:
            raise HostRangeError(f"more than {MAX_HOSTS:,} hosts; a job has at most {MAX_HOSTS:,}")
        return [pattern]
    count = count_hosts(pattern)
    if count > limit:
        room = "" if limit == MAX_HOSTS else f" (only {limit:,} more fit)"
        raise HostRangeError(
            f"{pattern!r} stands for {count:,} hosts; a job has at most {MAX_HOSTS:,} hosts{room}"
        )
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # see the docstring

    try:
        return list(NodeSet(pattern))
    except (NodeSetException, ValueError) as exc:
        raise HostRangeError(f"bad host range {pattern!r}: {exc}; {_EXAMPLE}") from None


def count_hosts(pattern: str) -> int:
    """How many names ``pattern`` stands for at most (overlaps counted twice), from its text."""
    if not _RANGE_TEXT.fullmatch(pattern):
        raise HostRangeError(
            f"bad host range {pattern!r}: a range takes letters, digits, '.', '-', '_' "
            f"and [...] only; {_EXAMPLE}"
        )
    total = 0
    for name in _split_outside_brackets(pattern):
        if not name:
            raise HostRangeError(f"bad host range {pattern!r}: an empty name between commas")
        if "[" in _GROUP.sub("", name) or "]" in _GROUP.sub("", name):
            raise HostRangeError(f"bad host range {pattern!r}: unbalanced brackets; {_EXAMPLE}")
        count = 1
        for group in _GROUP.findall(name):
            count *= _group_size(group, pattern)
        total += count
    return total


def _split_outside_brackets(pattern: str) -> list[str]:
    names, depth, start = [], 0, 0
    for index, char in enumerate(pattern):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            names.append(pattern[start:index])
            start = index + 1
    names.append(pattern[start:])
    return names


def _group_size(group: str, pattern: str) -> int:
    size = 0
    for item in group.split(","):
        match = _ITEM.fullmatch(item)
        if match is None:
            raise HostRangeError(
                f"bad host range {pattern!r}: {item!r} is not N, N-M or N-M/STEP; {_EXAMPLE}"
            )
        first = int(match.group(1))
        last = int(match.group(2) or first)
        step = int(match.group(3) or 1)
        if last < first or step < 1:
            raise HostRangeError(
                f"bad host range {pattern!r}: {item} runs backwards or has step 0; {_EXAMPLE}"
            )
        size += (last - first) // step + 1
    return size


def fold_hosts(names: list[str]) -> str:
    """The compact range form of ``names`` (``["gpu1", "gpu2"]`` → ``gpu[1-2]``)."""
    from ClusterShell.NodeSet import NodeSet  # see the docstring

    return str(NodeSet.fromlist(names))
