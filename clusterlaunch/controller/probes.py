"""The hosts' check programs as the controller reads them: one host's stages, and the loop.

The preflight's probes, ``run``'s agents before their go (:mod:`.preflight`,
:mod:`.held`) and ``doctor``'s program (:mod:`.doctor`) all report stages as
event frames behind the host's setup; :func:`pump_until` reads them until each
host reached a stage, ended, or was lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clusterlaunch.controller.readloop import is_lost, read_round
from clusterlaunch.controller.setups import kill_setups
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.model import NodePlan
from clusterlaunch.core.protocol import EVENT, NOISE
from clusterlaunch.core.reports import HostReport
from clusterlaunch.core.setupguard import SetupWatch
from clusterlaunch.transport.base import Connection, RemoteProcess
from clusterlaunch.transport.suspension import SuspendWatch


class ProbeRun:
    """One host's checks (the probe's, or an agent's before its go) and the stages reported.

    Also runs ``clusterlaunch doctor``'s program (controller/doctor.py).
    """

    def __init__(self, node: NodePlan, connection: Connection, script: str | None) -> None:
        self.report = HostReport(node)
        self.connection = connection
        self.script = script
        self.process: RemoteProcess | None = None
        self.start_error: str | None = None
        self.setup = SetupWatch(node.host, expected=bool(node.setup))
        self.abandoned = False
        self.lost = False  # its host stopped answering keepalives
        self.garbled: str | None = None
        self.decoder = FrameDecoder()
        self.stages: dict[str, dict[str, Any]] = {}
        self.early: list[tuple[bool, bytes]] = []
        """What the host printed besides the reports (a chatty shell, the setup's stderr),
        as ``(is_stderr, bytes)``: an agent shows it once its job starts, as it always did."""

    def started(self, process: RemoteProcess | TransportError) -> None:
        if isinstance(process, TransportError):  # a host problem like any other: in the table
            self.start_error = process.detail
        else:
            self.process = process

    def take(self, out: bytes, err: bytes) -> None:
        """Bytes the program printed: its stages, after the setup's reports and any noise."""
        self.report.stderr = (self.report.stderr + err)[-4096:]
        if err:
            self.early.append((True, err))
        out = self.setup.feed(out)
        if not out or self.garbled is not None:
            return
        try:
            for frame in self.decoder.feed(out):
                if frame.tag == EVENT:
                    fields = frame.event()
                    self.stages[str(fields.pop("stage", ""))] = fields
                    self.report.static_at = self.report.static_at or time.monotonic()  # static's
                elif frame.tag == NOISE:
                    self.early.append((False, frame.data))
        except ValueError as exc:  # FrameError, or an event that is not JSON
            self.garbled = str(exc)

    def send(self, data: bytes) -> None:
        if self.process is not None:
            self.process.send(data)

    def done(self) -> bool:
        gone = self.process is None or self.process.finished()
        return self.abandoned or gone or self.garbled is not None


def pump_until(
    runs: list[ProbeRun],
    ready: Any,
    deadline: float,
    notify: Callable[[str], None],
    progress: Callable[[ProbeRun], None] | None = None,
    awake: SuspendWatch | None = None,
) -> None:
    """Read ``runs`` until each is ``ready`` or ``deadline`` passed. A host that stops
    answering keepalives is given up on as lost (it held the preflight to its deadline,
    6-7 min with a setup); ``awake``: see :func:`~.readloop.is_lost` (its suspensions
    do not count toward a slow setup either)."""
    awake = awake or SuspendWatch()

    def take(run: ProbeRun, out: bytes, err: bytes) -> None:
        run.take(out, err)
        if progress is not None:
            progress(run)
        for line in run.setup.notices(awake.suspended_since):
            notify(line)

    while True:
        pending = [run for run in runs if not ready(run)]
        if not pending or time.monotonic() > deadline:
            return
        processes = [(run, run.process) for run in pending if run.process is not None]
        read_round(processes, min(0.2, deadline - time.monotonic()), take)
        for run in pending:
            if run.process is not None and not run.done() and is_lost(run.connection, awake):
                run.lost = run.abandoned = True
        overdue = [run for run in pending if run.setup.overdue()]
        kill_setups([(run.connection, run.setup) for run in overdue])
        for run in overdue:  # the host's own watchdog should have done it
            run.setup.timed_out = run.abandoned = True
