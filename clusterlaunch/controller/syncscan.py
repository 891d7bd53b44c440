"""``--sync``, the local side: read the source and refuse what cannot work, before any host.

Everything here is local and read-only, so the dry run does it too
(``run --sync --dry-run`` refuses what the real run would refuse). A problem is
a :class:`UsageError`: one line, exit 2, nothing contacted.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import JobPlan, LaunchOptions
from clusterlaunch.core.syncsource import (
    IGNORE_FILE,
    IgnoreRules,
    LocalEntry,
    SourceTree,
    inside,
)
from clusterlaunch.transport.local import local_path


def checked_source(plan: JobPlan, options: LaunchOptions | None, root: str) -> SourceTree:
    """:func:`scan_source`, then the checks that need the plan too.

    ``options``: ``run``'s (its script must be copied); None for ``exec``.
    """
    tree = scan_source(root)
    refuse_nested_workdirs(plan, tree)
    if options is not None:
        refuse_ignored_script(options, tree)
    return tree


def scan_source(root: str) -> SourceTree:
    """The files ``--sync`` copies from ``root``, honouring ``.clusterlaunchignore``."""
    rules = read_rules(os.path.join(root, IGNORE_FILE))
    entries: list[LocalEntry] = []
    _walk(root, "", rules, entries)
    return SourceTree(root, tuple(sorted(entries, key=lambda e: e.path)), rules)


def read_rules(path: str) -> IgnoreRules:
    """The ignore file's rules; the defaults alone where there is none."""
    try:
        # Non-blocking: a FIFO under that name hung here, before any host was contacted.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UsageError(f"{path}: a link to nothing; fix the link or delete it") from None
        return IgnoreRules()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror}); fix or delete the file") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise UsageError(
            f"{path}: not a regular file; make it a text file of patterns or delete it"
        )
    with os.fdopen(descriptor, "rb") as handle:
        try:
            text = handle.read().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}: cannot read: {exc}; fix or delete the file") from None
    return IgnoreRules(text, path)


def _walk(root: str, relative: str, rules: IgnoreRules, out: list[LocalEntry]) -> None:
    where = os.path.join(root, relative) if relative else root
    try:
        with os.scandir(where) as found:
            listing = [(e.name, e.stat(follow_symlinks=False)) for e in found]
    except OSError as exc:
        raise _unreadable(where, exc.strerror) from None
    for name, info in listing:
        path = f"{relative}/{name}" if relative else name
        if stat.S_ISDIR(info.st_mode):
            if not rules.ignores_dir(path):
                _walk(root, path, rules, out)
        elif (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)) and not (
            rules.ignores_file(path)
        ):
            # Sockets, FIFOs and devices are never copied.
            full = os.path.join(root, path)
            link = os.readlink(full) if stat.S_ISLNK(info.st_mode) else None
            _check_utf8(root, path, link)
            if link is None and not os.access(full, os.R_OK):
                # Found here, not as a failed copy on every host (rsync's exit 23 each).
                raise _unreadable(full, os.strerror(errno.EACCES))
            out.append(
                LocalEntry(path, info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode), link)
            )


def _unreadable(path: str, why: str | None) -> UsageError:
    return UsageError(
        f"{path}: cannot read ({why}); fix its permissions or add it to {IGNORE_FILE}"
    )


def _check_utf8(root: str, path: str, link: str | None) -> None:
    """SFTP paths are UTF-8: refuse other names here rather than fail halfway."""
    for name in (path, link or ""):
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            shown = os.path.join(root, path).encode("utf-8", "surrogateescape")
            raise UsageError(
                f"{shown!r}: name (or link target) is not UTF-8; rename it or add it "
                f"to {IGNORE_FILE}"
            ) from None


def refuse_ignored_script(options: LaunchOptions, tree: SourceTree) -> None:
    """``run``'s SCRIPT (or ``--no-python ./prog``) must be among the files copied.

    Left out, the hosts ran a stale copy from an earlier sync, or failed the preflight.
    A module (``-m``) and a program looked up in ``PATH`` are not files of the source.
    """
    script, kind = options.script, options.script_kind
    if kind == "module" or (kind == "program" and "/" not in script):
        return
    relative = inside(tree.root, posixpath.normpath(posixpath.join(tree.root, script)))
    if relative is None:
        return  # an absolute path elsewhere: not run from the copy
    if kind == "file" and os.path.isdir(os.path.join(tree.root, relative)):
        relative += "/__main__.py"  # what python runs of a directory
    why = tree.why_left_out(relative)
    if why is not None:
        raise UsageError(
            f"{script}: --sync would not copy it (left out by {why}), so the hosts would run "
            f"an old copy or none; change {IGNORE_FILE} so it keeps {relative}"
        )


def refuse_nested_workdirs(plan: JobPlan, tree: SourceTree) -> None:
    """A ``localhost`` workdir below the source would get the last copy copied into it again.

    Every run nested one more level (``reldest/reldest/...``); fine only where
    the ignore file leaves that directory out.
    """
    source = os.path.realpath(tree.root)
    for node in plan.nodes:
        if not node.target.is_local:
            continue  # where an SSH host's workdir lies, only the host can tell
        destination = os.path.realpath(local_path(node.workdir))
        relative = inside(source, destination)
        if relative is not None and tree.why_left_out(relative, is_dir=True) is None:
            shown = node.workdir + (f" ({destination})" if destination != node.workdir else "")
            raise UsageError(
                f"{node.host}: workdir {shown} is inside the directory "
                f"--sync copies ({source}), so every run would copy the last copy into it "
                f"again; choose a workdir outside it, or add the line /{relative}/ to "
                f"{IGNORE_FILE}"
            )
