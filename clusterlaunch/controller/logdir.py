"""``--log-dir``: the job's log files, created so that nobody can plant or swap them."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from clusterlaunch.core.errors import UsageError


class LogDir:
    """``--log-dir``: one raw file per global rank plus the controller's own log.

    Opened before any host is contacted. Every file is created new
    (``O_CREAT|O_EXCL|O_NOFOLLOW``, relative to the directory's descriptor):
    a file or symlink already there, planted or left by an earlier job, is
    refused, never followed or appended to. A directory every user may
    write to is refused unless it is sticky (like ``/tmp``), where nobody
    else can remove or replace our files. Files still empty at the end are
    removed, so a job that never started leaves the directory reusable.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._dir_fd: int | None = None
        self._files: dict[str, BinaryIO] = {}

    def open(self, names: Iterable[str] = ()) -> None:
        """Create the directory if needed and the files ``names``; UsageError if we cannot."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._dir_fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except (FileExistsError, NotADirectoryError):
            raise UsageError(f"--log-dir {self.path}: not a directory") from None
        except OSError as exc:
            raise UsageError(f"--log-dir {self.path}: cannot create it ({_reason(exc)})") from None
        mode = os.fstat(self._dir_fd).st_mode
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            self.close()
            raise UsageError(
                f"--log-dir {self.path}: every user may write to it, so anyone could swap "
                "the logs; use a directory only you can write to"
            )
        for name in names:
            self._create(name)

    def _create(self, name: str) -> BinaryIO:
        assert self._dir_fd is not None, "LogDir.open() first"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o666, dir_fd=self._dir_fd)
        except FileExistsError:
            self.close()
            raise UsageError(
                f"--log-dir {self.path}: {name} already exists (logs of an earlier job?); "
                "use a new directory, e.g. --log-dir logs/$(date +%Y%m%d-%H%M%S)"
            ) from None
        except OSError as exc:
            self.close()
            problem = f"cannot create {name} ({_reason(exc)})"
            raise UsageError(f"--log-dir {self.path}: {problem}") from None
        handle = self._files[name] = os.fdopen(fd, "ab")
        return handle

    def write(self, name: str, data: bytes) -> None:
        """Append ``data`` to file ``name`` in the directory."""
        handle = self._files.get(name) or self._create(name)
        handle.write(data)

    def flush(self) -> None:
        """Write out what every file holds so far (the files stay open)."""
        for handle in self._files.values():
            handle.flush()

    def close(self) -> None:
        """Flush and close every file; remove those that stayed empty. Idempotent."""
        for name, handle in self._files.items():
            handle.flush()
            info = os.fstat(handle.fileno())
            handle.close()
            if info.st_size == 0 and self._dir_fd is not None:
                self._remove_if_ours(name, info)
        self._files.clear()
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _remove_if_ours(self, name: str, info: os.stat_result) -> None:
        with contextlib.suppress(OSError):
            now = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                os.unlink(name, dir_fd=self._dir_fd)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
