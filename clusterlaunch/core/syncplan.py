"""Code sync, the pure part: which hosts share a directory, what to send, the reports.

``--sync`` copies the controller's current directory to every host's workdir
before anything starts. Everything that can be decided without I/O lives here
(which files: :mod:`clusterlaunch.core.syncsource`) and is tested by equality;
:mod:`clusterlaunch.controller.sync` talks to the hosts and runs rsync. See
docs/sync.md for the user-facing rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from clusterlaunch.core.syncsource import LocalEntry, SourceTree, human_size

RSYNC_MARK = "@@sync@@ "
"""Starts each line of rsync's ``--out-format`` report, to tell it from anything else."""

RSYNC = "rsync"
SFTP = "sftp"
LOCAL = "local"
SAME = "same"
"""The destination is the source directory itself: nothing to copy."""


# ------------------------------------------------------------------ who shares a directory


@dataclass(frozen=True)
class HostCheck:
    """What one node's destination check found."""

    node_rank: int
    host: str
    local: bool
    """Reached through the local transport (``localhost``)."""
    rsync: bool
    """rsync is on the host's PATH."""
    seen: frozenset[str]
    """Every token found in its destination directory (its own included)."""


@dataclass(frozen=True)
class SyncTask:
    """One copy into one directory, on behalf of every node that sees that directory."""

    node_ranks: tuple[int, ...]
    """The nodes sharing the directory; the first one's destination is written."""
    method: str
    """:data:`RSYNC`, :data:`SFTP`, :data:`LOCAL` or :data:`SAME`."""


def plan_tasks(
    checks: Sequence[HostCheck], source_token: str | None, local_rsync: bool
) -> list[SyncTask]:
    """One task per distinct directory, in node order.

    Nodes that saw the same set of tokens share a directory (the same path on
    one machine, or a shared file system), so it is written once, and never by
    two writers at the same time. A directory holding the source's own token
    *is* the source, and needs no copy.
    """
    groups: dict[frozenset[str], list[HostCheck]] = {}
    for check in checks:
        groups.setdefault(check.seen, []).append(check)
    tasks = []
    for seen, members in groups.items():
        if source_token is not None and source_token in seen:
            tasks.append(SyncTask(tuple(m.node_rank for m in members), SAME))
            continue
        # Prefer a plain local copy, then rsync, then SFTP (always possible).
        local = [m for m in members if m.local]
        with_rsync = [m for m in members if m.rsync and not m.local] if local_rsync else []
        leader, method = (
            (local[0], LOCAL)
            if local
            else (with_rsync[0], RSYNC)
            if with_rsync
            else (members[0], SFTP)
        )
        order = [leader, *(m for m in members if m is not leader)]
        tasks.append(SyncTask(tuple(m.node_rank for m in order), method))
    return tasks


# ---------------------------------------------------------------------- what to send (SFTP)


@dataclass(frozen=True)
class RemoteEntry:
    """One name in a destination directory, as SFTP (or ``lstat``) describes it."""

    kind: str
    """``file``, ``dir``, ``link`` or ``other``."""
    size: int = 0
    mtime: int = 0
    mode: int = 0
    link: str | None = None


@dataclass(frozen=True)
class CopyPlan:
    """What one destination needs, in order: directories, then entries, then modes."""

    mkdirs: tuple[str, ...] = ()
    sends: tuple[LocalEntry, ...] = ()
    chmods: tuple[LocalEntry, ...] = ()
    conflicts: tuple[str, ...] = ()
    """Paths whose type on the host blocks the copy (a file where a directory goes)."""


def plan_copy(tree: SourceTree, remote: Mapping[str, RemoteEntry]) -> CopyPlan:
    """Compare the source with what the destination holds (relative paths as keys).

    A file is sent when it is missing, of another type, or differs in size or
    in modification time (whole seconds), which is rsync's quick check; a file
    that differs in permissions only is chmod-ed. Nothing is ever deleted.
    """
    mkdirs, sends, chmods, conflicts = [], [], [], []
    for directory in tree.dirs:
        there = remote.get(directory)
        if there is None:
            mkdirs.append(directory)
        elif there.kind != "dir":
            conflicts.append(f"{directory} is a {there.kind} on the host, not a directory")
    for entry in tree.entries:
        there = remote.get(entry.path)
        if there is not None and there.kind == "dir":
            conflicts.append(f"{entry.path} is a directory on the host")
        elif _differs(entry, there):
            sends.append(entry)
        elif entry.link is None and there is not None and there.mode != entry.mode:
            chmods.append(entry)
    return CopyPlan(tuple(mkdirs), tuple(sends), tuple(chmods), tuple(conflicts))


def _differs(entry: LocalEntry, there: RemoteEntry | None) -> bool:
    if entry.link is not None:
        return there is None or there.kind != "link" or there.link != entry.link
    if there is None or there.kind != "file":
        return True
    return there.size != entry.size or there.mtime != entry.mtime


# -------------------------------------------------------------------------------- reports


@dataclass(frozen=True)
class Transfer:
    """What one copy sent: paths of files and links, and the files' total size."""

    paths: tuple[str, ...] = ()
    size: int = 0


def transfer_of(plan: CopyPlan) -> Transfer:
    """What executing ``plan`` sends."""
    return Transfer(
        tuple(e.path for e in plan.sends), sum(e.size for e in plan.sends if not e.link)
    )


_ESCAPE = re.compile(rb"\\#([0-7]{3})")


def parse_rsync_report(out: bytes) -> Transfer:
    """Read rsync's ``--out-format='@@sync@@ %i %l %n'`` lines.

    ``<f`` items are files sent to the host (``>f`` if received), ``cL`` symlinks made;
    anything else (a ``.f...p...`` permission fix, directories) sent no data.
    rsync writes unprintable bytes of names as ``\\#ooo``.
    """
    paths, size, mark = [], 0, RSYNC_MARK.encode()
    for line in out.split(b"\n"):
        if not line.startswith(mark):
            continue
        item, length, name = line[len(mark) :].split(b" ", 2)
        if item.startswith((b"<f", b">f", b"cL")):
            raw = _ESCAPE.sub(lambda m: bytes([int(m[1], 8)]), name)
            paths.append(raw.decode("utf-8", "surrogateescape"))
            size += int(length) if item[1:2] == b"f" else 0
    return Transfer(tuple(paths), size)


def report_line(
    hosts: Sequence[str], dest: str, method: str, sent: Transfer, seconds: float
) -> str:
    """One line per copy, naming every host that shares the directory."""
    who = hosts[0] + (f" (and {', '.join(hosts[1:])}: same directory)" if hosts[1:] else "")
    if method == SAME:
        return f"sync {who}: skipped, {dest} is this directory"
    count = len(sent.paths)
    return (
        f"sync {who} -> {dest}: {method}, sent {count} file{'s' if count != 1 else ''} "
        f"({human_size(sent.size)}) in {seconds:.2f} s"
    )
