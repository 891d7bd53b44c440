"""``--log-dir``: the job's log files, created so that nobody can plant or swap them."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from clusterlaunch.controller.console import message_bytes
from clusterlaunch.core.errors import OutputLost, PreflightError, UsageError
from clusterlaunch.core.exits import ExitStatus

# Never writable by group or others, even under umask 000: anyone could then swap or
# rewrite the logs. The umask may take more away (027: nothing for others).
DIR_MODE = 0o755
FILE_MODE = 0o644


def rank_log(rank: int, restart_count: int | None = None) -> str:
    """The file of ``rank``'s output: ``rank-N.log`` in the first attempt, then one file per
    attempt (``rank-N.attempt-2.log``), so each holds one process's bytes exactly."""
    if not restart_count:
        return f"rank-{rank}.log"
    return f"rank-{rank}.attempt-{restart_count + 1}.log"


_LATER_ATTEMPT = re.compile(r"rank-[0-9]+\.attempt-([0-9]+)\.log")
""":func:`rank_log`'s name for a later attempt, with the attempt's number."""
_EARLIER_JOB = (
    "already exists (logs of an earlier job?); use a new directory, "
    "e.g. --log-dir logs/$(date +%Y%m%d-%H%M%S)"
)
_SINCE_STARTED = (  # the job's own names never repeat, and open() found none of them
    "was created since the job started, by someone else who may write to the directory; "
    "use a directory only you can write to"
)


class LogDir:
    """``--log-dir``: one raw file per global rank plus the controller's own log.

    Opened before any host is contacted. Every file is created new
    (``O_CREAT|O_EXCL|O_NOFOLLOW``, relative to the directory's descriptor):
    a file or symlink already there, planted or left by an earlier job, is
    refused, never followed or appended to. A directory every user may
    write to is refused unless it is sticky (like ``/tmp``), where nobody
    else can remove or replace our files. What we create (the directory, its
    missing parents, the files) is never writable by group or others, whatever
    the umask. Files still empty at the end are removed, so a job that never
    started leaves the directory reusable.

    A file that cannot be written (a full disk, ``ulimit -f``) is given up
    alone: the others are still written.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self._dir_fd: int | None = None
        self._files: dict[str, BinaryIO] = {}
        self.lost: dict[str, str] = {}
        """The files given up, each with why (``cannot write PATH (REASON)``); the first
        stopped the job (each attempt's first, with restarts). Their writes go nowhere since
        (until :meth:`resume`)."""
        self._unsaid: list[str] = []  # those in lost no one has said yet
        self._stopped = False  # a file given up stopped the job (this attempt of it)

    def open(self, names: Iterable[str] = (), restarts: int = 0) -> None:
        """Create the directory if needed and the files ``names``; UsageError if we cannot.

        ``restarts``: how many later attempts the job may make. Their ranks' files are
        made as each begins (how many ranks it has is known then), so none of their
        names may be taken now: a restart would find it there."""
        try:
            _make_dirs(self.path)
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
        try:
            for name in names:
                self._create(name, _EARLIER_JOB)
            self._refuse_later_attempts(restarts)
        except UsageError:
            self.close()
            raise

    def create(self, names: Iterable[str]) -> None:
        """Create the files of a later attempt (its ranks'), as it begins; UsageError if one
        is there (:meth:`open` found none) or cannot be made. The other files stay open."""
        for name in names:
            self._create(name, _SINCE_STARTED)

    def _refuse_later_attempts(self, restarts: int) -> None:
        if not restarts:
            return
        assert self._dir_fd is not None
        for name in os.listdir(self._dir_fd):
            found = _LATER_ATTEMPT.fullmatch(name)
            if found and 2 <= int(found[1]) <= restarts + 1:
                raise UsageError(f"--log-dir {self.path}: {name} {_EARLIER_JOB}")

    def _open_file(self, name: str) -> BinaryIO:
        assert self._dir_fd is not None, "LogDir.open() first"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, FILE_MODE, dir_fd=self._dir_fd)
        # Unbuffered: each chunk is one write(2), in the file as soon as the console has it
        # (``tail -f`` follows the job; a controller killed outright loses nothing it showed).
        handle = self._files[name] = os.fdopen(fd, "ab", buffering=0)
        return handle

    def _create(self, name: str, exists: str) -> None:
        """Create ``name``; ``exists``: what to say when a file or link of that name is there."""
        try:
            self._open_file(name)
        except FileExistsError:
            raise UsageError(f"--log-dir {self.path}: {name} {exists}") from None
        except OSError as exc:
            problem = f"cannot create {name} ({_reason(exc)})"
            raise UsageError(f"--log-dir {self.path}: {problem}") from None

    def write(self, name: str, data: bytes) -> None:
        """Append ``data`` to file ``name`` in the directory.

        A file that cannot be written (a full disk) is given up alone, and the
        first one stops the job: raises :class:`~clusterlaunch.core.errors.OutputLost`
        naming it. Writes to a file given up go nowhere; the other files still
        get theirs.
        """
        if name in self.lost:
            return
        try:
            _write_all(self._files.get(name) or self._open_file(name), data)
        except OSError as exc:
            self._give_up(name, exc)

    def flush(self) -> None:
        """Write out what every file holds so far (the files stay open); as :meth:`write`,
        the first file given up raised once every other file is flushed."""
        first: OutputLost | None = None
        for name, handle in self._files.items():
            try:
                if name not in self.lost:
                    handle.flush()
            except OSError as exc:
                try:
                    self._give_up(name, exc)
                except OutputLost as lost:
                    first = first or lost
        if first is not None:
            raise first

    def _give_up(self, name: str, exc: OSError) -> None:
        problem = self.lost[name] = f"cannot write {self.path / name} ({_reason(exc)})"
        self._unsaid.append(problem)
        if not self._stopped:
            self._stopped = True
            raise OutputLost(ExitStatus.FAILED, problem)

    def resume(self, gap: Callable[[str], bytes]) -> list[str]:
        """Before a restart: write again each file given up that the job still writes
        (controller.log, which lasts it; an attempt's own files are closed with it),
        beginning with ``gap(why it was given up)``, the line that says lines are missing
        there. The paths written again; UsageError naming one that still cannot be written
        (the restart would run with a log missing all its lines). From now on the first
        file given up stops the job again, as in the first attempt."""
        self._stopped = False
        resumed = []
        for name, problem in list(self.lost.items()):
            if name not in self._files:
                continue
            try:  # a newline first: the write that failed most likely wrote part of a line
                _write_all(self._files[name], b"\n" + gap(problem))
            except OSError as exc:
                why = f"{name} still cannot be written ({_reason(exc)})"
                raise UsageError(f"--log-dir {self.path}: {why}") from None
            del self.lost[name]
            resumed.append(str(self.path / name))
        return resumed

    def unsaid(self) -> list[str]:
        """Why each file was given up since the last call (for the caller to say once)."""
        said, self._unsaid = self._unsaid, []
        return said

    def close_files(self, names: Iterable[str]) -> None:
        """Flush and close the files ``names`` (an attempt's, once it ended), removing those
        that stayed empty; the others stay open."""
        for name in names:
            handle = self._files.pop(name, None)
            if handle is None:
                continue
            with contextlib.suppress(OSError):  # lost: flush() said so, or close() is early
                handle.flush()
            info = os.fstat(handle.fileno())
            with contextlib.suppress(OSError):  # the descriptor is closed even so
                handle.close()
            if info.st_size == 0 and self._dir_fd is not None:
                self._remove_if_ours(name, info)

    def close(self) -> None:
        """Flush and close every file; remove those that stayed empty. Idempotent."""
        self.close_files(list(self._files))
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def _remove_if_ours(self, name: str, info: os.stat_result) -> None:
        with contextlib.suppress(OSError):
            now = os.stat(name, dir_fd=self._dir_fd, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (info.st_dev, info.st_ino):
                os.unlink(name, dir_fd=self._dir_fd)


def _make_dirs(path: Path, parents: bool = True) -> None:
    """``mkdir -p path``, each directory it creates made with :data:`DIR_MODE`."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileNotFoundError:
        if not parents or path.parent == path:
            raise
        _make_dirs(path.parent)
        _make_dirs(path, parents=False)
    except OSError:
        if not path.is_dir():
            raise


def _write_all(handle: BinaryIO, data: bytes) -> None:
    """All of ``data``: an unbuffered file may take part of it (a disk filling up)."""
    view = memoryview(data)
    while view:
        view = view[handle.write(view) :]


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def stamp() -> str:
    """The time in front of each of clusterlaunch's own lines in ``controller.log``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


@contextlib.contextmanager
def closing(log_dir: LogDir | None) -> Iterator[None]:
    """Close ``log_dir`` at the end (empty files go). A failed preflight is written to
    ``controller.log`` first, which is then kept: a batch job's only record of why
    nothing started."""
    try:
        yield
    except PreflightError as failure:
        if log_dir is not None:
            with contextlib.suppress(OutputLost):
                log_dir.write("controller.log", message_bytes(f"{stamp()} {failure.report()}\n"))
        raise
    finally:
        if log_dir is not None:
            log_dir.close()
