"""Host expressions (``gpu[01-16]``, ``node0,node1``, ``n[1-8]!n3``) via ClusterShell's NodeSet.

ClusterShell's NodeSet is the hostlist syntax Slurm users already write; every
expression it accepts means here what it means there: ``,`` (union), ``!``
(difference), ``&`` (intersection), ``^`` (symmetric difference), spaces
inside brackets and around operators. Names without any of ``[],!&^`` pass
through untouched, so addresses such as ``10.0.0.1`` and ``fe80::1`` are never
reinterpreted. ``@group`` lookups are refused: they would read ClusterShell's
group files and run their shell commands.

NodeSet builds every name of every operand (``len()`` included: 3,000,000
names took 11 s and 300 MB here), so the operands are first counted from the
text, with RangeSet's own rules, and an expression whose operands stand for
more than :data:`MAX_OPERAND_NAMES` names is refused before NodeSet sees it.
NodeSet is imported where it is used: it loads subprocess, select and
threading, and the pure core loads no I/O module at import
(tests/unit/test_layout.py).
"""

from __future__ import annotations

from clusterlaunch.core.limits import MAX_HOSTS, MAX_WORLD_SIZE

OPERATORS = ",!&^"
_SPECIAL = frozenset("[]" + OPERATORS)
MAX_OPERAND_NAMES = MAX_WORLD_SIZE
"""Names all operands of one expression may stand for, before set operations:
65,536 names cost NodeSet about 0.2 s; the result is then held to the host limit."""
_EXAMPLE = "write ranges like gpu[01-16], gpu[1-4,7] or gpu[1-8]!gpu3"


class HostRangeError(ValueError):
    """A host expression that cannot be expanded, gives no host, or too many."""


def is_expression(text: str) -> bool:
    """True when ``text`` holds NodeSet syntax (brackets or set operators)."""
    return any(char in _SPECIAL for char in text)


def expand_hosts(pattern: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand ``pattern`` into at most ``limit`` host names as NodeSet does (sorted, no repeat)."""
    group = group_operand(pattern)
    if group is not None:
        raise HostRangeError(
            f"{pattern!r}: {group.strip()!r} is a ClusterShell group; clusterlaunch reads no "
            "group files: list the hosts (or a range) instead"
        )
    if not is_expression(pattern):
        if limit < 1:
            raise HostRangeError(f"more than {MAX_HOSTS:,} hosts; a job has at most {MAX_HOSTS:,}")
        return [pattern]
    bound = count_hosts(pattern)
    plain = not any(op in pattern for op in "!&^")
    if bound > (limit if plain else MAX_OPERAND_NAMES):
        raise HostRangeError(_too_many(pattern, bound, limit, plain))
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
    from ClusterShell.RangeSet import RangeSetException  # imported here: see the docstring

    try:
        names = list(NodeSet(pattern, resolver=RESOLVER_NOGROUP))
    except (NodeSetException, RangeSetException, ValueError) as exc:
        raise HostRangeError(f"bad host range {pattern!r}: {exc}; {_EXAMPLE}") from None
    if not names:
        raise HostRangeError(f"{pattern!r} stands for no host; {_EXAMPLE}")
    if len(names) > limit:
        raise HostRangeError(_too_many(pattern, len(names), limit, True))
    return names


def _too_many(pattern: str, count: int, limit: int, exact: bool) -> str:
    if not exact:
        return (
            f"the operands of {pattern!r} stand for {count:,} names; clusterlaunch expands at "
            f"most {MAX_OPERAND_NAMES:,} (a job has at most {MAX_HOSTS:,} hosts)"
        )
    room = "" if limit == MAX_HOSTS else f" (only {limit:,} more fit)"
    return f"{pattern!r} stands for {count:,} hosts; a job has at most {MAX_HOSTS:,} hosts{room}"


def group_operand(pattern: str) -> str | None:
    """The first ``@group`` operand of ``pattern``, or ``None``."""
    return next((op for op in operands(pattern) if op.lstrip().startswith("@")), None)


def operands(pattern: str) -> list[str]:
    """``pattern`` split at the operators outside brackets (``a[1,2]!b`` → ``a[1,2]``, ``b``)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(pattern):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char in OPERATORS and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
    parts.append(pattern[start:])
    return parts


def count_hosts(pattern: str) -> int:
    """How many names the operands of ``pattern`` stand for, together, from the text alone.

    An upper bound of the result (``!`` and ``&`` only remove names, ``,``
    merges repeats) and exactly the work NodeSet does. Bracket contents are
    read as RangeSet reads them; what it would refuse is refused here.
    """
    total = 0
    for operand in operands(pattern):
        count = 1
        for group in _bracket_groups(operand, pattern):
            count *= _group_size(group, pattern)
        total += count
    return total


def _bracket_groups(operand: str, pattern: str) -> list[str]:
    groups, rest = [], operand
    while "[" in rest or "]" in rest:
        before, bracket, after = rest.partition("[")
        close = after.find("]")
        if "]" in before or not bracket or close < 0 or "[" in after[:close]:
            raise HostRangeError(f"bad host range {pattern!r}: unbalanced brackets; {_EXAMPLE}")
        groups.append(after[:close])
        rest = after[close + 1 :]
    return groups


def _group_size(group: str, pattern: str) -> int:
    """The size of ``[group]``: RangeSet._parse's rules (steps, spaces, negatives), counted."""
    size = 0
    for item in group.split(","):
        bounds = _item_bounds(item.strip())
        if isinstance(bounds, str):
            raise HostRangeError(
                f"bad host range {pattern!r}: {item.strip()!r} {bounds}; {_EXAMPLE}"
            )
        first, last, step = bounds
        size += (last - first) // step + 1
    return size


def _item_bounds(item: str) -> tuple[int, int, int] | str:
    """``(first, last, step)`` of one range item, or why RangeSet would refuse it."""
    base, slash, step_text = item.partition("/")
    pieces = [piece.strip() for piece in base.split("-")]
    try:
        step = int(step_text) if slash else 1
        if len(pieces) == 1:
            first = last = int(pieces[0])
        elif len(pieces) == 2 and not pieces[0]:  # "-5"
            first = last = -int(pieces[1])
        elif len(pieces) == 2:
            first, last = int(pieces[0]), int(pieces[1])
        elif len(pieces) == 3 and not pieces[0]:  # "-3-5"
            first, last = -int(pieces[1]), int(pieces[2])
        elif len(pieces) == 4 and not pieces[0] and not pieces[2]:  # "-8--4"
            first, last = -int(pieces[1]), -int(pieces[3])
        else:
            raise ValueError(item)
    except ValueError:
        return "is not N, N-M or N-M/STEP"
    if step < 1 or (step != 1 and len(pieces) == 1):
        return "has a step that is not a positive number after a range"
    if last < first:
        return "runs backwards"
    if abs(last) > 10**100:
        return "is too large"
    return first, last, step


def fold_hosts(names: list[str]) -> str:
    """The compact range form of ``names`` (``["gpu1", "gpu2"]`` → ``gpu[1-2]``)."""
    from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet  # see the docstring

    return str(NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP))
