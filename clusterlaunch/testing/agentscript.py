"""The script a fake host plays (see :mod:`clusterlaunch.testing.fakes`): steps and builders.

Frames are built with the agent's own encoder, so a scripted event is the
bytes a real agent would send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.core.exits import SIGNAL_BASE, shell_status
from clusterlaunch.remote.wire import Output


@dataclass(frozen=True)
class Frame:
    """One frame as the agent writes it (``o<rank>``, ``e<rank>``, ``O``, ``E``, ``J``)."""

    tag: bytes
    data: bytes


@dataclass(frozen=True)
class Raw:
    """Bytes on the channel's stdout outside any frame (a chatty ``.bashrc``, or garbage)."""

    data: bytes


@dataclass(frozen=True)
class Stderr:
    """Bytes on the channel's stderr (the remote shell's or ssh's own messages)."""

    data: bytes


@dataclass(frozen=True)
class Exit:
    """The channel closes; ``status`` None: without an exit status (the host went away)."""

    status: int | None


@dataclass(frozen=True)
class Unresponsive:
    """From now on the connection fails its keepalives (``alive()`` is False)."""


@dataclass(frozen=True)
class Pause:
    """Play the rest only after the controller has polled this host ``reads`` more times."""

    reads: int


@dataclass(frozen=True)
class Hang:
    """Nothing more happens, but the controller is kept polling (for a fake clock to run)."""


@dataclass(frozen=True)
class Interrupt:
    """A signal reaches the controller while it reads this host (as cli/main.py raises it)."""

    exit_code: int
    reason: str

    @property
    def signum(self) -> int:
        """The signal that gives its status (130: SIGINT)."""
        return self.exit_code - SIGNAL_BASE


@dataclass(frozen=True)
class Suspend:
    """The controller was stopped (Ctrl-Z) for ``seconds``: its fake clock jumps."""

    seconds: float


Step = Frame | Raw | Stderr | Exit | Unresponsive | Pause | Hang | Interrupt | Suspend


def event(**fields: Any) -> Frame:
    """A JSON event frame, encoded as the agent encodes it."""
    encoder = Output(fd=-1)
    encoder.event(**fields)
    header, _, data = b"".join(encoder.queue).partition(b"\n")
    return Frame(header.split(b" ")[0], data)


def started(pid: int = 4242) -> Frame:
    """The agent's first event: the job runs."""
    return event(event="started", pid=pid, agent_pid=pid - 1, hostname="fake", subreaper=True)


def rank_output(rank: int, data: bytes, stderr: bool = False) -> Frame:
    """Bytes a worker wrote (global ``rank``)."""
    return Frame(b"%s%d" % (b"e" if stderr else b"o", rank), data)


def job_output(data: bytes, stderr: bool = False) -> Frame:
    """Bytes torchrun itself (or the command of ``exec``) wrote."""
    return Frame(b"E" if stderr else b"O", data)


def stopping(reason: str) -> Frame:
    """The agent announces a teardown (``requested``, ``killed``, ``eof``, ``controller-lost``)."""
    return event(event="stopping", reason=reason)


def exits(code: int | None, reason: str = "exited", **fields: Any) -> list[Step]:
    """The agent's ``exit`` report for a job that ended with Popen ``code``, then the status."""
    report = event(event="exit", reason=reason, code=code, **fields)
    return [report, Exit(shell_status(code))]


def root_cause(local_rank: int, exitcode: int, failed_at: float = 1.0) -> dict[str, Any]:
    """What the agent parses out of torchrun's "Root Cause" block."""
    name = {-9: "SIGKILL", -15: "SIGTERM", -6: "SIGABRT"}.get(exitcode)
    return {"exitcode": exitcode, "local_rank": local_rank, "signal": name, "failed_at": failed_at}


DEFAULT_REACTIONS: Mapping[str, Sequence[Step]] = {
    "t": [stopping("requested"), *exits(-15, "requested")],
    "k": [stopping("requested"), *exits(-9, "requested")],
    "eof": [stopping("eof"), *exits(-15, "eof")],
}


@dataclass
class FakeAgent:
    """What one host does: the start script and its reactions (``t``, ``k``, ``h``, ``eof``)."""

    start: Sequence[Step] = ()
    on: Mapping[str, Sequence[Step]] = field(default_factory=dict)

    def reaction(self, trigger: str) -> Sequence[Step] | None:
        """The steps for ``trigger``; None: nothing happens (a heartbeat, by default)."""
        if trigger in self.on:
            return self.on[trigger]
        return DEFAULT_REACTIONS.get(trigger)
