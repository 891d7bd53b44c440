"""This controller's own suspensions (Ctrl-Z, SIGSTOP), seen as jumps of its clock.

While the controller is stopped, so are its keepalive thread, paramiko's readers
and every loop that judges hosts, but their clocks run on: a host's silence over
that time was ours, and a deadline that ran out during it ran out on us. So the
hosts' silence is not judged for :data:`RESUME_GRACE_S` after a resume (the
keepalives catch up meanwhile), and the handshake's deadline is moved by the
time we were stopped (:func:`~clusterlaunch.transport.handshake.timed_by_deadline`).

One watch serves a whole command, every phase of it: connecting, ``--sync``, the
preflight and the job (the launcher hands the request's watch to each). A watch
per phase missed a stop that began in the phase before: a Ctrl-Z across the end
of a host's setup failed a healthy job with "host lost" once the job started.
While the command runs, a thread of the watch's own looks at the clock
(:meth:`SuspendWatch.looking`); every judgement of a host looks first too.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

SUSPEND_GAP_S = 2.0
"""Our own clock jumping this far between two looks means we were stopped."""
LOOK_S = 0.5
"""How often the watch's own thread looks while a command runs (:meth:`SuspendWatch.looking`);
the read loops look more often, right before each judgement."""
RESUME_GRACE_S = 8.0
"""After a resume, the keepalives need this long to catch up (one round asks, the next
notes the answer); until then no host counts as lost."""
KEPT = 16
"""The last suspensions remembered, for :meth:`SuspendWatch.suspended_since`."""


class SuspendWatch:
    """Called as ``awake()``: notes the time; False for :data:`RESUME_GRACE_S` after a
    suspension ended. Every liveness judgement calls it first, from any thread, so a stop
    is noticed before the silence it caused could be misread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last_look = clock()
        self._stops: deque[tuple[float, float]] = deque(maxlen=KEPT)  # (stopped, resumed)
        self._lookers = 0

    def __call__(self) -> bool:
        with self._lock:
            now = self._clock()
            if now - self._last_look > SUSPEND_GAP_S:
                self._stops.append((self._last_look, now))
            self._last_look = now
            resumed = self._stops[-1][1] if self._stops else None
        return resumed is None or now - resumed >= RESUME_GRACE_S

    @contextlib.contextmanager
    def looking(self) -> Iterator[None]:
        """Look every :data:`LOOK_S` from a thread of its own while the block runs, so a quiet
        spell of the others (planning, an rsync, a slow login) is never taken for a stop.
        Time before the outermost block counts as no stop; nested blocks share its thread."""
        with self._lock:
            self._lookers += 1
            outermost = self._lookers == 1
            if outermost:
                self._last_look = self._clock()
        done = threading.Event()
        thread = threading.Thread(
            target=self._look_until, args=(done,), name="suspend-watch", daemon=True
        )
        if outermost:
            thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._lookers -= 1
            done.set()
            if outermost:
                thread.join()

    def _look_until(self, done: threading.Event) -> None:
        while not done.wait(LOOK_S):
            self()

    def just_resumed(self) -> bool:
        """True within ``RESUME_GRACE_S`` of a resume: a silence the hosts report now was ours."""
        return not self()

    def suspended_since(self, since: float) -> float:
        """How many seconds of this clock since ``since`` we spent stopped (0.0: none seen)."""
        self()  # a stop that has just ended counts
        with self._lock:
            return sum(resumed - max(stopped, since) for stopped, resumed in self._stops
                       if resumed > since)  # fmt: skip
