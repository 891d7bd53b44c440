"""One host's part of a running job, as the supervisor holds it.

The pure part (what the verdict needs) is :class:`~clusterlaunch.core.outcome.HostState`;
this adds what only the running controller has: the connection, the agent's
process on it, the decoder of its frames and the watch on its ``setup:``.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.core import defaults
from clusterlaunch.core.frames import Frame, FrameDecoder
from clusterlaunch.core.losttouch import job_may_run_on
from clusterlaunch.core.outcome import HostState
from clusterlaunch.core.rankdisk import full_text
from clusterlaunch.core.rankrewrites import rewritten_text
from clusterlaunch.core.setupguard import SetupWatch
from clusterlaunch.core.unreported import unreported_end
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.proclimit import start_thread


@dataclass(kw_only=True)
class HostRun(HostState):
    """A host's state plus the live objects the supervisor reads and writes."""

    connection: Connection
    process: RemoteProcess | None = None
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    frames: deque[Frame] = field(default_factory=deque)
    """Decoded, not yet routed: a signal's stop amid a read's frames leaves the rest here,
    for the teardown (which goes on routing every host) or the host's last flush."""
    flushed: bool = False  # its stream ended and all it left was passed on
    cut_off: bool = False
    """Lost by its keepalives: nothing we send arrives, so its job may run on until its
    agent misses our heartbeats for ``--heartbeat-timeout``."""
    setup: SetupWatch = field(init=False)
    """Its ``setup:``'s reports, read before the agent's frames."""

    def __post_init__(self) -> None:
        self.setup = SetupWatch(self.node.host, expected=bool(self.node.setup))

    def notice(self, event: Mapping[str, Any]) -> str | None:
        """What the user is told of this event of its agent's, if anything: an exit's message
        (why its job could not start), its rank files' folder found full (noted for the
        verdict, which names it as the likely cause of a failure), a rank's file rewritten
        (it opened /dev/stderr)."""
        if event.get("event") == "full":
            self.full = dict(event)
            return full_text(self.node.host, event)
        if event.get("event") == "rewritten":
            return rewritten_text(self.node.host, event)
        if event.get("event") == "exit" and event.get("message"):
            return f"{self.node.host}: {event['message']}"
        return None

    def teardown_note(self, heartbeat_timeout: float, job_id: str) -> str | None:
        """What to say of this host once the teardown is over; None: its job ended."""
        if not self.done:
            return f"{self.node.host}: no confirmation that the job ended"
        if self.cut_off:  # it never got our "t": only its heartbeat timeout ends its job
            return job_may_run_on(self.node.host, heartbeat_timeout, job_id)
        return None

    def judge_unreported_end(self, last_lines: Sequence[str]) -> str | None:
        """Its stream ended without the agent's exit record: set its status and whether it was
        lost (:func:`~clusterlaunch.core.unreported.unreported_end`); what to say of it."""
        synced = self.decoder.synced  # the agent's Python started: it wrote its marker
        self.status, said, self.lost = unreported_end(
            self.status, self.setup, synced, last_lines, self.node.python
        )
        return said


class Heartbeats:
    """A thread of its own sends every running host's agent ``h`` each interval, so a
    console that blocks (``| less``) never starves the agents into tearing down."""

    def __init__(self, hosts: Sequence[HostRun]) -> None:
        self._hosts = hosts
        self._stop = threading.Event()
        self._started = False

    def start(self) -> None:
        """Start sending (once), before the job starts: a thread that cannot start
        (:class:`~clusterlaunch.core.errors.LimitReached`) then stops nothing that ran."""
        if not self._started:
            start_thread(threading.Thread(target=self._send, name="heartbeat", daemon=True))
            self._started = True

    def stop(self) -> None:
        self._stop.set()

    def _send(self) -> None:
        while not self._stop.wait(defaults.HEARTBEAT_INTERVAL_S):
            for host in self._hosts:
                if host.process is not None and not host.done:
                    host.process.send(b"h")
