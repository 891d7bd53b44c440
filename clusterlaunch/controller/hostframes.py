"""A host's output on its way from its channel to the console and the ``--log-dir`` files.

A signal to the controller raises ``StopJob`` wherever its main thread is. Raised while
the routing of one read's frames (up to 1 MiB) was under way, it lost every frame not yet
routed: decoded, then dropped, as the teardown went on reading new bytes (a SIGTERM cost
``rank-2.log`` 815 of its first lines). So each read is decoded onto its host's queue
(``HostRun.frames``), and each frame is taken off it and written to the log files under
the router's hold (``core/interrupts.py``: the stop waits for those few statements). Only
console writes let the stop through, as they may block (a terminal stopped with Ctrl-S):
raised there, it leaves the frames after it queued, for the teardown, which routes every
host on, or the host's last flush.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from clusterlaunch.controller.hostrun import HostRun
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core.frames import Frame, FrameError
from clusterlaunch.core.protocol import EVENT, JOB_STDERR, JOB_STDOUT, NOISE


class HostFrames:
    """Routes each host's frames through the :class:`OutputRouter`; ``on_event``: the
    supervisor's, for the agent's events."""

    def __init__(
        self, router: OutputRouter, on_event: Callable[[HostRun, dict[str, Any]], None]
    ) -> None:
        self._router = router
        self._on_event = on_event

    def take(self, host: HostRun, out: bytes, err: bytes) -> None:
        """``host``'s new bytes, read under the router's hold: queued, then routed."""
        garbled = None
        try:  # the setup's reports come before the agent's frames
            if out := host.setup.feed(out):
                host.frames.extend(host.decoder.feed(out))
        except FrameError as exc:
            garbled = f"{host.node.host}: garbled agent output ({exc})"
        if err:  # what ssh or srun wrote, into controller.log before any console write
            self._router.transport_output(host.node.host, err)
        if garbled is not None:
            self._router.message(garbled)
        self.route(host)

    def route(self, host: HostRun, frames: Iterable[Frame] = ()) -> None:
        """``frames`` after those still queued on ``host``, each into the files as it leaves."""
        host.frames.extend(frames)
        while host.frames:
            with self._router.hold:
                self._route(host, host.frames.popleft())

    def _route(self, host: HostRun, frame: Frame) -> None:
        if (rank := frame.rank) is not None:
            self._router.rank_output(rank, frame.is_stderr, frame.data)
        elif frame.tag == NOISE:  # the host's shell, before the agent: not the job's output
            self._router.shell_output(host.node.host, frame.data, ended=host.decoder.synced)
        elif frame.tag in (JOB_STDOUT, JOB_STDERR):
            self._router.host_output(host.node.host, frame.is_stderr, frame.data)
        elif frame.tag == EVENT:
            try:
                self._on_event(host, frame.event())
            except FrameError as exc:  # said; the frames after it are routed on
                self._router.message(f"{host.node.host}: garbled agent output ({exc})")
