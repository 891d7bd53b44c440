"""A scripted stand-in for a host: a ``Connection`` whose "agent" plays a script.

The script's steps are in :mod:`clusterlaunch.testing.agentscript`.

The supervisor, the verdict and teardown can then be tested without SSH or
processes (like fabric's ``MockChannel``). What the fake sends is what a real
agent sends: frames encoded by the agent's own writer
(:class:`clusterlaunch.remote.wire.Output`), through real pipes, so the
controller's ``select`` wakes exactly as it would; nothing sleeps.

A script is a list of steps. ``start`` plays when the agent starts; the
controller's control bytes (``t`` teardown, ``k`` kill, ``h`` heartbeat) and
stdin EOF (``eof``) each play their own reaction once, replacing whatever the
start script had not played yet (the job is being torn down). Unscripted
``t``/``k``/``eof`` get what a real agent does: a ``stopping`` event, then an
``exit`` report and the matching status.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from clusterlaunch.core.errors import StopJob, TransportError
from clusterlaunch.remote.wire import Output
from clusterlaunch.testing.agentscript import (
    Exit,
    FakeAgent,
    Frame,
    Hang,
    Interrupt,
    Pause,
    Raw,
    Stderr,
    Step,
    Suspend,
    Unresponsive,
)
from clusterlaunch.transport.base import Connection, RemoteProcess


class FakeClock:
    """Monotonic time that moves only by ``tick`` per reading and by explicit jumps."""

    def __init__(self, tick: float = 0.0, now: float = 1000.0) -> None:
        self.tick = tick
        self.now = now

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        """Jump forward (a suspended controller)."""
        self.now += seconds


class FakeProcess(RemoteProcess):
    """The agent's channel: stdout and stderr are pipes the script writes into."""

    def __init__(self, connection: FakeConnection, agent: FakeAgent) -> None:
        self._connection = connection
        self._agent = agent
        self._lock = threading.RLock()
        self._out_r, out_w = os.pipe()
        self._err_r, self._err_w = os.pipe()
        self._tick_r, self._tick_w = os.pipe()  # readable while the script wants polling
        for fd in (self._out_r, self._err_r):
            os.set_blocking(fd, False)
        self._wire = Output(fd=out_w)
        os.set_blocking(out_w, False)
        self._writers: list[int] = [out_w, self._err_w]
        self._queue: list[Step] = []
        self._played: set[str] = set()
        self._synced = False
        self._waiting = 0  # polls left before the queue plays on
        self._hanging = False
        self._ticking = False
        self._interrupt: Interrupt | None = None
        self._exit: Exit | None = None  # set once the script ended the channel
        self._status: int | None = None
        self._eof = {self._out_r: False, self._err_r: False}
        self.received = bytearray()
        """Every byte the controller sent on stdin."""
        self.stdin_closed = False
        self.closed = False
        self._play("start", agent.start)

    # -- RemoteProcess ----------------------------------------------------------
    def waitables(self) -> list[int]:
        """The open pipes, and a wake-up while the script wants to be polled."""
        if self.closed:
            return []
        return [fd for fd, done in self._eof.items() if not done] + [self._tick_r]

    def read(self) -> tuple[bytes, bytes]:
        """Available bytes; each call is one poll, which may play the next steps."""
        with self._lock:
            if self.closed:
                return b"", b""
            if self._interrupt is not None:
                interrupt, self._interrupt = self._interrupt, None
                self._update_tick()
                raise StopJob(interrupt.exit_code, interrupt.reason, interrupt.signum)
            if self._waiting > 0:
                self._waiting -= 1
                if self._waiting == 0:
                    self._run_queue()
            self._drain_wire()
            return self._take(self._out_r), self._take(self._err_r)

    def send(self, data: bytes) -> bool:
        """Record control bytes; ``t``, ``k`` and ``h`` play their reactions (once each)."""
        with self._lock:
            if self.stdin_closed or self.closed or self._exit is not None:
                return False
            self.received += data
            for byte in data:
                self._trigger(chr(byte))
            return True

    def close_stdin(self) -> None:
        """EOF on stdin: plays the ``eof`` reaction."""
        with self._lock:
            if not self.stdin_closed:
                self.stdin_closed = True
                if self._exit is None:
                    self._trigger("eof")

    def exit_status(self) -> int | None:
        """The status the script exited with, once every byte before it was written."""
        return self._status

    def finished(self) -> bool:
        """Exited and everything read."""
        return self._exit is not None and not self._writers and all(self._eof.values())

    def close(self) -> None:
        """Drop the pipes (once: a closed fd number may already belong to someone else)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            for fd in (*self._eof, self._tick_r, self._tick_w, *self._writers):
                os.close(fd)
            self._writers.clear()
            self._eof = dict.fromkeys(self._eof, True)

    # -- the script -------------------------------------------------------------
    @property
    def heartbeats(self) -> int:
        """How many ``h`` the controller sent."""
        return self.received.count(b"h")

    def _trigger(self, name: str) -> None:
        if name in self._played or self._exit is not None:
            return
        steps = self._agent.reaction(name)
        if steps is not None:
            self._queue.clear()  # the job is being torn down: its script ends here
            self._waiting = 0
            self._hanging = False
            self._play(name, steps)

    def _play(self, name: str, steps: Sequence[Step]) -> None:
        self._played.add(name)
        self._queue.extend(steps)
        self._run_queue()

    def _run_queue(self) -> None:
        while self._queue and self._exit is None and not self._waiting:
            step = self._queue.pop(0)
            if isinstance(step, Pause):
                self._waiting = max(step.reads, 1)
            else:
                self._apply(step)
        self._drain_wire()
        self._update_tick()

    def _apply(self, step: Step) -> None:
        if isinstance(step, Frame):
            if not self._synced:
                self._wire.start()  # the sync marker, as the agent's first bytes
                self._synced = True
            self._wire.frame(step.tag, step.data)
        elif isinstance(step, Raw):
            self._wire.put(step.data)
        elif isinstance(step, Stderr):
            os.write(self._err_w, step.data)  # small: a pipe holds 64 KiB
        elif isinstance(step, Exit):
            self._exit = step
        elif isinstance(step, Unresponsive):
            self._connection.responsive = False
        elif isinstance(step, Hang):
            self._hanging = True
        elif isinstance(step, Interrupt):
            self._interrupt = step
        elif isinstance(step, Suspend):
            self._connection.suspend(step.seconds)

    def _drain_wire(self) -> None:
        """Write queued frames as far as the pipe takes them; close once the exit is due."""
        self._wire.flush()
        if self._exit is not None and not self._wire.unsent and self._writers:
            self._status = self._exit.status
            for fd in self._writers:
                os.close(fd)
            self._writers.clear()

    def _take(self, fd: int) -> bytes:
        if self._eof[fd]:
            return b""
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b""
        if not data:
            self._eof[fd] = True
        return data

    def _update_tick(self) -> None:
        """Keep the wake-up fd readable exactly while the script needs polls to go on."""
        wanted = self._exit is None and bool(self._waiting or self._hanging or self._interrupt)
        if self.closed or wanted == self._ticking:
            return
        if wanted:
            os.write(self._tick_w, b"!")
        else:
            os.read(self._tick_r, 1)
        self._ticking = wanted


class FakeConnection(Connection):
    """A host whose ``start`` returns a :class:`FakeProcess` playing ``agent``."""

    def __init__(
        self,
        host: str,
        agent: FakeAgent | None = None,
        clock: FakeClock | None = None,
        start_error: str | None = None,
    ) -> None:
        self.host = host
        self.agent = agent or FakeAgent()
        self.clock = clock
        self.start_error = start_error
        self.responsive = True
        self.started: list[tuple[str, bytes]] = []
        """Every ``(command, stdin)`` started on this host."""
        self.processes: list[FakeProcess] = []
        self.alive_checks: list[float | None] = []
        """When (on the fake clock, if any) the controller asked whether the host is alive."""
        self.closed = False

    @property
    def process(self) -> FakeProcess:
        """The (last) process started on this host."""
        return self.processes[-1]

    def start(self, command: str, stdin: bytes = b"") -> FakeProcess:
        """Play the agent; ``TransportError`` when the host refuses channels."""
        if self.start_error is not None:
            raise TransportError(self.host, self.start_error)
        self.started.append((command, stdin))
        self.processes.append(FakeProcess(self, self.agent))
        return self.process

    def alive(self) -> bool:
        """False once the script made the host unresponsive."""
        self.alive_checks.append(self.clock.now if self.clock is not None else None)
        return self.responsive

    def close(self) -> None:
        """Close every process's pipes."""
        self.closed = True
        for process in self.processes:
            process.close()

    def suspend(self, seconds: float) -> None:
        """The controller was stopped: its clock jumps (only with a fake clock)."""
        if self.clock is not None:
            self.clock.advance(seconds)
