"""The controller's stdout and stderr, and a reader that goes away.

Separate from the routing (``output.py``) because every command writes to the
console, while only a running job routes rank and host output.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable
from typing import Any, BinaryIO

from clusterlaunch.core.errors import OutputLost
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.lines import OpenLine
from clusterlaunch.core.render import printable


class Console:
    """The controller's stdout/stderr as binary streams.

    A reader that goes away (``clusterlaunch run ... | head -2``) is a clean
    stop, not a traceback: the first write or flush that meets the closed pipe
    raises :class:`~clusterlaunch.core.errors.OutputLost` with 141 (the job is torn
    down by the usual ``finally`` paths), and from then on that stream writes
    to ``/dev/null``, so teardown and the interpreter's own flush at exit
    cannot fail on it again. A terminal that was closed under a controller no
    SIGHUP reached (``setsid``) fails writes with EIO: the same stop, as the
    hangup it is (129); any other failed write (a full disk) stops with 1.
    Either way the log files still get everything the teardown brings.
    """

    def __init__(self, out: BinaryIO | None = None, err: BinaryIO | None = None) -> None:
        stopped = Stopped()  # one stop for the console: the other stream breaks quietly
        self.out = GuardedStream(out or sys.stdout.buffer, "stdout", stopped)
        self.err = GuardedStream(err or sys.stderr.buffer, "stderr", stopped)
        # On one terminal (or with 2>&1) stdout and stderr share their lines: a bar
        # left on one is in the way of the other. Piped apart, each has its own.
        out_line = OpenLine()
        shared = _same_place(self.out, self.err)
        self._lines = {self.out: out_line, self.err: out_line if shared else OpenLine()}

    def open_line(self, stream: GuardedStream) -> OpenLine:
        """Whose line the place ``stream`` shows is left in the middle of (see ``output.py``)."""
        return self._lines[stream]

    def end_line(
        self, stream: GuardedStream | None = None, owner: object = None, stop: bool = True
    ) -> None:
        """End an unfinished line (not ``owner``'s) where ``stream`` (None: any) shows,
        so that what is written next starts a line of its own."""
        lines = self._lines.values() if stream is None else [self._lines[stream]]
        for line in dict.fromkeys(lines):  # once each, when the streams share one
            where = line.cut(owner)
            if isinstance(where, GuardedStream):
                where.write(b"\n", stop)
                where.flush(stop)

    def color(self) -> bool:
        """Colour only for a terminal, and never when NO_COLOR is set."""
        return "NO_COLOR" not in os.environ and self.out.isatty()

    def say(self, text: str) -> None:
        """One of clusterlaunch's own lines on stderr; never raises (a closed stderr drops it)."""
        self.end_line(self.err, stop=False)
        self.err.write(message_bytes(text) + b"\n", stop=False)
        self.err.flush(stop=False)

    def show(self, text: str) -> None:
        """clusterlaunch's own report on stdout (a table: ``check``, ``ps``, ``doctor``)."""
        self.out.write(message_bytes(text) + b"\n")


class HeldStop:
    """The console's stop (:class:`OutputLost`), held while the router passes on the rest of
    what was read with it: raised at once, it cut the read short, and the frames after it
    reached no ``--log-dir`` file."""

    def __init__(self) -> None:
        self._stop: OutputLost | None = None

    def hold(self, stop: OutputLost) -> None:
        self._stop = self._stop or stop

    def raise_held(self) -> None:
        """Raise the stop held since the last call, if any."""
        stop, self._stop = self._stop, None
        if stop is not None:
            raise stop


class Stopped:
    """Whether a console stream already stopped the job (shared by stdout and stderr)."""

    def __init__(self) -> None:
        self.raised = False


class GuardedStream:
    """A binary output stream that turns a closed pipe into one clean stop (see ``Console``)."""

    def __init__(self, stream: BinaryIO, name: str, stopped: Stopped | None = None) -> None:
        self.stream = stream
        self.name = name
        self.broken = False
        self._stopped = stopped or Stopped()

    def write(self, data: bytes | memoryview, stop: bool = True) -> int:
        """Write ``data``; ``stop=False``: a closed pipe is silenced without raising."""
        if not self.broken:
            try:
                self._write_all(memoryview(data))
            except OSError as exc:
                self._broke(exc, stop)
        return len(data)

    def _write_all(self, view: memoryview) -> None:
        # An unbuffered stdout (python -u, PYTHONUNBUFFERED) is a raw FileIO: a reader
        # that goes away mid-write makes it return a short count, not raise. Writing
        # the rest is what meets the closed pipe (EPIPE) and stops as it should.
        while view:
            written = self.stream.write(view)
            if written is None:  # a non-blocking stream that is full: dropped, as ever
                return
            view = view[written:]

    def write_pieces(self, pieces: Iterable[bytes | memoryview]) -> None:
        """Write each piece in turn (a prefixed block: see ``core.lines.prefixed_pieces``)."""
        for piece in pieces:
            self.write(piece)

    def flush(self, stop: bool = True) -> None:
        """Flush; ``stop=False`` as for :meth:`write`."""
        if not self.broken:
            try:
                self.stream.flush()
            except OSError as exc:
                self._broke(exc, stop)

    def isatty(self) -> bool:
        """True when the stream is a terminal."""
        return not self.broken and self.stream.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)  # getvalue() of a BytesIO in tests, fileno(), ...

    def _broke(self, exc: OSError, stop: bool) -> None:
        self.broken = True
        try:
            # The advice of Python's signal docs: point the descriptor at /dev/null,
            # so the buffered bytes and the flush at exit go nowhere instead of failing.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # io.UnsupportedOperation is both
            pass
        if stop and not self._stopped.raised:
            self._stopped.raised = True
            raise OutputLost(*_stop_for(exc, self.name))


def closed_std_streams() -> list[str]:
    """stdin, stdout, stderr: those whose descriptor was closed (``>&-``), each now given
    ``/dev/null``, so that no file or socket opened later takes its number (the ssh
    and rsync children would write their output into it)."""
    closed = []
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(name)
            devnull = os.open(os.devnull, os.O_RDWR)
            if devnull != fd:  # the lowest free number: fd itself, unless a lower one was too
                os.dup2(devnull, fd)
                os.close(devnull)
    return closed


def _stop_for(exc: OSError, name: str) -> tuple[int, str]:
    """The exit status and reason for a console stream that can no longer be written."""
    if isinstance(exc, BrokenPipeError):
        return ExitStatus.BROKEN_PIPE, f"{name} was closed (broken pipe)"
    if exc.errno == errno.EIO:  # the terminal is gone: a hangup without the SIGHUP
        return ExitStatus.HANGUP, f"{name}'s terminal was closed (input/output error)"
    return ExitStatus.FAILED, f"cannot write {name}: {exc.strerror or exc}"


def _same_place(out: GuardedStream, err: GuardedStream) -> bool:
    """True when both streams reach one terminal, pipe or file (``2>&1``)."""
    if out.stream is err.stream:
        return True
    try:
        one, two = os.fstat(out.stream.fileno()), os.fstat(err.stream.fileno())
    except (OSError, ValueError, AttributeError):  # a BytesIO has no descriptor
        return False
    return (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino)


def message_bytes(text: str) -> bytes:
    """One of clusterlaunch's own messages or reports, as the console and ``controller.log``
    get it: what a host wrote into it (a setup's output, a rank's last lines, an error of
    ssh's or of a tool there) has its control characters written as escapes, so it cannot
    drive the terminal. The output of ranks and commands is not a message: it goes as it
    was written (``output.py``)."""
    return as_bytes(printable(text, lines=True))


def as_bytes(text: str) -> bytes:
    """``text`` for the console: undecodable bytes from argv or paths back as they were."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate that no byte stands for
        return text.encode("utf-8", "backslashreplace")
