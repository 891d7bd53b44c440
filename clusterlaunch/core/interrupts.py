"""What a signal to the controller does: where it waits, and what once the job is stopping (pure).

A teardown lets the ranks' SIGTERM handlers finish (``--grace``). Only an
interactive interrupt asks to skip that: a second Ctrl-C, or a first one while
a failure or ``--timeout`` is tearing the job down. SIGHUP and SIGTERM start a
teardown and never hurry one, because neither means "now" when it comes again:

* one closing terminal sends SIGHUP more than once (the kernel's, and the
  shell's or the terminal emulator's passing it on; seen here: tmux's and the
  kernel's), often with every write to it failing (EIO) as well;
* one stop request may deliver SIGTERM twice (GNU ``timeout`` signals the
  process, then its process group), and the managers that send it (systemd,
  Kubernetes, Slurm, torchrun to its workers) follow it with their own SIGKILL
  when they stop waiting, after a grace of their own, not with a second SIGTERM.

Where it waits: :class:`StopHold`, while a host's output goes to the log files.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import TracebackType

from clusterlaunch.core.errors import StopJob

HURRYING = signal.SIGINT
"""The one signal that, repeated, skips the grace period: Ctrl-C."""


def stops(first: int | None, signum: int) -> bool:
    """Whether signal ``signum`` to the controller stops it (an exception in its main
    thread); ``first``: the signal that already did, None while none has.

    Once one has, a SIGHUP or SIGTERM is dropped: the teardown it would ask for is
    under way, and an exception raised again wherever the main thread happens to be
    (a ``finally`` sending the hosts their teardown, or writing the summary) cut
    that short. A Ctrl-C always gets through (:func:`hurries`).
    """
    return first is None or signum == HURRYING


def hurries(signum: int | None) -> bool:
    """Whether a stop that comes during a teardown kills everything at once.

    ``signum``: the signal it came from (None: no signal, as a console that can no
    longer be written). Only a Ctrl-C does.
    """
    return signum == HURRYING


class StopHold:
    """Where a signal's stop waits a moment: while a host's bytes are taken off its queue and
    written to the ``--log-dir`` files (a few statements, ``with hold:``). Raised amid them,
    the stop lost them: taken, in no file yet. It is raised when they are done, or before a
    console write (:meth:`let_through`), which may block (a terminal stopped with Ctrl-S, a
    slow pipe): a signal that comes during one is raised at once, as outside a hold, so a
    signal still stops the controller. Holds nest (the outermost ends them).
    """

    def __init__(self) -> None:
        self._depth = 0
        self._waiting: StopJob | None = None

    def deliver(self, stop: StopJob) -> None:
        """Raise ``stop``, or keep it until the hold ends. A second stop during one hold
        (a Ctrl-C: :func:`stops`) is raised at once, in place of the first."""
        if self._depth and self._waiting is None:
            self._waiting = stop
            return
        self._waiting = None
        raise stop

    def __enter__(self) -> None:
        self._depth += 1

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if not self._depth:
            self._raise_waiting()

    @contextlib.contextmanager
    def let_through(self) -> Iterator[None]:
        """No hold for the block (a console write): a stop waiting is raised first."""
        depth, self._depth = self._depth, 0
        try:
            self._raise_waiting()
            yield
        finally:
            self._depth = depth

    def _raise_waiting(self) -> None:
        stop, self._waiting = self._waiting, None
        if stop is not None:
            raise stop


def installed_hold() -> StopHold:
    """The hold of the signal handler this command installed (``cli/main.py``: it is one),
    found where the handler is; without one, a hold no signal reaches."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(signum)
        if isinstance(handler, StopHold):
            return handler
    return StopHold()
