"""Code sync, the source side: which files ``--sync`` copies, and what that tells locally.

Pure: :mod:`clusterlaunch.controller.syncscan` walks the tree and reads the
ignore file; everything decided from what it found lives here and is tested by
equality. See docs/sync.md for the user-facing rules.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

from clusterlaunch.core.errors import UsageError

IGNORE_FILE = ".clusterlaunchignore"
TOKEN_PREFIX = ".clusterlaunch-sync-"
"""Names of the short-lived files that show which hosts share a directory."""
DEFAULT_IGNORED = (".git",)
"""Ignored unless the ignore file re-includes them (``!.git``)."""
ALWAYS_IGNORED = ("/" + TOKEN_PREFIX + "*",)
"""Appended after the user's patterns, so they cannot be re-included."""


class IgnoreRules:
    """``.clusterlaunchignore`` (gitignore syntax) plus the defaults.

    As in git, a file is excluded when it matches or when any directory above
    it does: an excluded directory is never entered, so ``!`` cannot re-include
    a file inside it.
    """

    def __init__(self, text: str = "", source: str = IGNORE_FILE) -> None:
        import pathspec  # here: it loads asyncio and subprocess (tests/unit/test_layout.py)

        self._lines = text.splitlines()
        self.source = source
        for number, line in enumerate(self._lines, 1):
            try:
                pathspec.GitIgnoreSpec.from_lines([line])
            except (ValueError, re.error) as exc:  # per line: pathspec says not which
                raise UsageError(
                    f"{source}:{number}: {line!r}: {exc}; fix the pattern (gitignore "
                    "syntax) or delete the line"
                ) from None
        patterns = [*DEFAULT_IGNORED, *self._lines, *ALWAYS_IGNORED]
        self._spec = pathspec.GitIgnoreSpec.from_lines(patterns)

    def ignores_dir(self, path: str) -> bool:
        """True when directory ``path`` (relative, '/'-separated) is not entered."""
        return bool(self._spec.match_file(path + "/"))

    def ignores_file(self, path: str) -> bool:
        """True when the pattern list alone excludes file (or symlink) ``path``."""
        return bool(self._spec.match_file(path))

    def selects(self, path: str) -> bool:
        """True when file ``path`` is copied: neither it nor a directory above is ignored."""
        return self.why_left_out(path) is None

    def why_left_out(self, path: str, is_dir: bool = False) -> str | None:
        """None when ``path`` is copied (entered, for a directory), else what leaves it out.

        ``.clusterlaunchignore:3 ('*.py')``, or the default that does, naming
        the directory above it when that is what the pattern matched.
        """
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            here = "/".join(parts[:depth])
            as_dir = depth < len(parts) or is_dir
            if self.ignores_dir(here) if as_dir else self.ignores_file(here):
                shown = here + "/" if as_dir else here
                where = "" if here == path else f" (it leaves out {shown})"
                return self._deciding_line(shown) + where
        return None

    def _deciding_line(self, path: str) -> str:
        """The line that excludes ``path``: as in git, the last pattern that matches decides."""
        import pathspec

        if path.startswith(TOKEN_PREFIX):
            return f"the reserved name {TOKEN_PREFIX}*"
        for number in range(len(self._lines), 0, -1):
            line = self._lines[number - 1]
            if pathspec.GitIgnoreSpec.from_lines([line]).check_file(path).include is not None:
                return f"{self.source}:{number} ({line!r})"
        return f"the default {', '.join(DEFAULT_IGNORED)} exclusion"


@dataclass(frozen=True)
class LocalEntry:
    """One file or symlink of the source tree."""

    path: str
    """Relative to the source directory, '/'-separated."""
    size: int
    mtime_ns: int
    mode: int
    """Permission bits (``stat.S_IMODE``)."""
    link: str | None = None
    """A symlink's target; the link itself is copied, never what it points to."""

    @property
    def mtime(self) -> int:
        """Whole seconds: all SFTP can store, so changes are judged at this precision."""
        return self.mtime_ns // 1_000_000_000


@dataclass(frozen=True)
class SourceTree:
    """The selected files of the source directory, in sorted path order."""

    root: str
    entries: tuple[LocalEntry, ...]
    rules: IgnoreRules | None = None
    """The rules that selected them (None: the defaults only)."""

    @property
    def dirs(self) -> tuple[str, ...]:
        """Every directory that holds a selected entry, parents before children."""
        found = {
            "/".join(parts[:i])
            for entry in self.entries
            for parts in [entry.path.split("/")]
            for i in range(1, len(parts))
        }
        return tuple(sorted(found, key=lambda d: (d.count("/"), d)))

    @property
    def size(self) -> int:
        """The total size of the files (links count nothing)."""
        return sum(entry.size for entry in self.entries if entry.link is None)

    def why_left_out(self, path: str, is_dir: bool = False) -> str | None:
        """What leaves ``path`` out of the copy (see :meth:`IgnoreRules.why_left_out`)."""
        return (self.rules or IgnoreRules()).why_left_out(path, is_dir)

    def files_from(self) -> bytes:
        """The NUL-separated list for ``rsync --from0 --files-from=-``."""
        return b"".join(
            entry.path.encode("utf-8", "surrogateescape") + b"\0" for entry in self.entries
        )


def select(paths: Iterable[str], rules: IgnoreRules) -> list[str]:
    """The paths ``rules`` select, sorted (the order every copy uses)."""
    return sorted(path for path in paths if rules.selects(path))


def inside(root: str, path: str) -> str | None:
    """``path`` relative to ``root`` ('/'-separated) when it lies below it, else None.

    Both absolute and already resolved (no ``..``, no links); ``root`` itself is
    not below itself.
    """
    relative = posixpath.relpath(path, root)
    return None if relative == "." or relative.startswith("../") or relative == ".." else relative


def human_size(size: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def dry_run_line(tree: SourceTree) -> str:
    """What ``--dry-run --sync`` says would be copied, as one more ``#`` line of the plan."""
    count = len(tree.entries)
    return (
        f"# --sync: {count} file{'s' if count != 1 else ''} ({human_size(tree.size)}) from "
        f"{tree.root} to each host's workdir (only those that differ are sent)\n"
    )


def dry_run_field(tree: SourceTree) -> dict[str, object]:
    """The same for ``--dry-run --json``: the ``sync`` field, present only with ``--sync``."""
    return {"source": tree.root, "files": len(tree.entries), "bytes": tree.size}
