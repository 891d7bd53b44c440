"""Host range expansion (``gpu[01-16]``, ``rack[1-2]-n[01-08]``) via ClusterShell.

ClusterShell's NodeSet is the hostlist syntax Slurm users already write; we use
it rather than a hand-written parser. Names without brackets pass through
untouched, so addresses such as ``10.0.0.1`` are never reinterpreted.

NodeSet is imported where it is used: it loads subprocess, select and
threading (for group resolvers we never use), and the pure core loads no I/O
module at import (tests/unit/test_layout.py).
"""

from __future__ import annotations


class HostRangeError(ValueError):
    """A host range that ClusterShell cannot parse."""


def expand_hosts(pattern: str) -> list[str]:
    """Expand ``pattern`` into host names, in ascending order within each range."""
    if "[" not in pattern and "]" not in pattern:
        return [pattern]
    from ClusterShell.NodeSet import NodeSet, NodeSetException  # see the module docstring

    try:
        return list(NodeSet(pattern))
    except NodeSetException as exc:
        raise HostRangeError(
            f"bad host range {pattern!r}: {exc}; write ranges like gpu[01-16] or gpu[1-4,7]"
        ) from None


def fold_hosts(names: list[str]) -> str:
    """The compact range form of ``names`` (``["gpu1", "gpu2"]`` → ``gpu[1-2]``)."""
    from ClusterShell.NodeSet import NodeSet  # see the module docstring

    return str(NodeSet.fromlist(names))
