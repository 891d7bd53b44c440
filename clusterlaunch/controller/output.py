"""Where job output goes: the console (prefixed, filtered, coloured) and ``--log-dir``.

The supervisor hands over raw chunks tagged by rank or host; this module
splits them into lines (per stream, so ranks never merge), prefixes them and
writes them. Worker stdout goes to stdout, worker stderr to stderr.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from clusterlaunch.core.errors import StopJob, UsageError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.lines import LineBuffer, Prefixes, TailKeeper, prefix_block


class Console:
    """The controller's stdout/stderr as binary streams.

    A reader that goes away (``clusterlaunch run ... | head -2``) is a clean
    stop, not a traceback: the first write or flush that meets the closed pipe
    raises :class:`~clusterlaunch.core.errors.StopJob` with 141 (the job is torn
    down by the usual ``finally`` paths), and from then on that stream writes
    to ``/dev/null``, so teardown and the interpreter's own flush at exit
    cannot fail on it again.
    """

    def __init__(self, out: BinaryIO | None = None, err: BinaryIO | None = None) -> None:
        self.out = GuardedStream(out or sys.stdout.buffer, "stdout")
        self.err = GuardedStream(err or sys.stderr.buffer, "stderr")

    def color(self) -> bool:
        """Colour only for a terminal, and never when NO_COLOR is set."""
        return "NO_COLOR" not in os.environ and self.out.isatty()

    def say(self, text: str) -> None:
        """One of clusterlaunch's own lines on stderr; never raises (a closed stderr drops it)."""
        self.err.write(as_bytes(text) + b"\n", stop=False)
        self.err.flush(stop=False)


class GuardedStream:
    """A binary output stream that turns a closed pipe into one clean stop (see ``Console``)."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self.stream = stream
        self.name = name
        self.broken = False

    def write(self, data: bytes, stop: bool = True) -> int:
        """Write ``data``; ``stop=False``: a closed pipe is silenced without raising."""
        if not self.broken:
            try:
                return self.stream.write(data)
            except BrokenPipeError:
                self._broke(stop)
        return len(data)

    def flush(self, stop: bool = True) -> None:
        """Flush; ``stop=False`` as for :meth:`write`."""
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._broke(stop)

    def isatty(self) -> bool:
        """True when the stream is a terminal."""
        return not self.broken and self.stream.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)  # getvalue() of a BytesIO in tests, fileno(), ...

    def _broke(self, stop: bool) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError):  # io.UnsupportedOperation is both
            # The advice of Python's signal docs: point the descriptor at /dev/null,
            # so the buffered bytes and the flush at exit go nowhere instead of failing.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        if stop:
            raise StopJob(ExitStatus.BROKEN_PIPE, f"{self.name} was closed (broken pipe)")


def as_bytes(text: str) -> bytes:
    """``text`` for the console: undecodable bytes from argv or paths back as they were."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte stands for
        return text.encode("utf-8", "backslashreplace")


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


class OutputRouter:
    """Turns tagged chunks into lines on the console and in the log directory."""

    def __init__(
        self,
        prefixes: Prefixes,
        console: Console,
        rank_filter: frozenset[int] | None = None,
        log_dir: LogDir | None = None,
        plain_prefixes: Prefixes | None = None,
    ) -> None:
        self._prefixes = prefixes
        self._plain = plain_prefixes or prefixes  # for files: no colour codes
        self._console = console
        self._filter = rank_filter
        self._log_dir = log_dir
        self._buffers: dict[tuple[object, bool], LineBuffer] = {}
        self.tails = TailKeeper()
        self._quiet_hosts = False
        self.hidden_lines = 0

    @property
    def has_log_dir(self) -> bool:
        """True when output is also written to ``--log-dir``."""
        return self._log_dir is not None

    def quiet_hosts(self) -> None:
        """From now on, torchrun's own output goes to the log only.

        Called when teardown starts: every torchrun then prints the same
        SignalException traceback, which would bury the failure summary.
        Worker output is never hidden.
        """
        self._quiet_hosts = True

    def rank_output(self, rank: int, is_stderr: bool, data: bytes) -> None:
        """A worker's raw output chunk."""
        buffer = self._buffer(rank, is_stderr)
        block = buffer.feed(data)
        self._emit_rank(rank, is_stderr, block, buffer.continued)

    def host_output(self, host: str, is_stderr: bool, data: bytes) -> None:
        """Output of the host's shell, torchrun itself, or a command run by ``exec``."""
        buffer = self._buffer(host, is_stderr)
        block = buffer.feed(data)
        self._emit_host(host, is_stderr, block, buffer.continued)

    def message(self, text: str) -> None:
        """clusterlaunch's own message, always to stderr."""
        line = f"clusterlaunch: {text}\n".encode()
        self._console.err.write(line)
        self._console.err.flush()
        self._log("controller.log", f"{_stamp()} ".encode() + line)

    def flush_host(self, host: str, ranks: Iterable[int]) -> None:
        """A host ended: its unfinished last lines are passed on as they are.

        ``rank-N.log`` gets the bytes exactly (no newline is added); the
        console and ``controller.log`` get a newline after a last line that
        had none, so whatever comes next starts on a line of its own.
        """
        for rank in ranks:
            for is_stderr in (False, True):
                buffer = self._buffer(rank, is_stderr)
                block = buffer.flush()
                self._emit_rank(rank, is_stderr, block, buffer.continued)
                if buffer.line_open:
                    self._emit_rank(rank, is_stderr, b"\n", True, to_log=False)
        for is_stderr in (False, True):
            buffer = self._buffer(host, is_stderr)
            block = buffer.flush()
            self._emit_host(host, is_stderr, block, buffer.continued)
            if buffer.line_open:
                self._emit_host(host, is_stderr, b"\n", True)

    def close(self) -> None:
        """Flush the console and close log files."""
        self._console.out.flush()
        self._console.err.flush()
        if self._log_dir is not None:
            self._log_dir.close()

    def _buffer(self, key: object, is_stderr: bool) -> LineBuffer:
        buffer = self._buffers.get((key, is_stderr))
        if buffer is None:
            buffer = self._buffers[(key, is_stderr)] = LineBuffer(live_cr=True)
        return buffer

    def _emit_rank(
        self, rank: int, is_stderr: bool, block: bytes, continued: bool, to_log: bool = True
    ) -> None:
        if not block:
            return
        self.tails.add(rank, block)
        if self._log_dir is not None and to_log:
            self._log_dir.write(f"rank-{rank}.log", block)
        if self._filter is None or rank in self._filter:
            stream = self._console.err if is_stderr else self._console.out
            stream.write(prefix_block(self._prefixes.rank(rank), block, continued))
            stream.flush()

    def _emit_host(self, host: str, is_stderr: bool, block: bytes, continued: bool) -> None:
        if not block:
            return
        self.tails.add(("host", host), block)
        self._log("controller.log", prefix_block(self._plain.host(host), block, continued))
        if self._quiet_hosts:
            self.hidden_lines += block.count(b"\n")
            return
        stream = self._console.err if is_stderr else self._console.out
        stream.write(prefix_block(self._prefixes.host(host), block, continued))
        stream.flush()

    def _log(self, name: str, data: bytes) -> None:
        if self._log_dir is not None:
            self._log_dir.write(name, data)


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")
