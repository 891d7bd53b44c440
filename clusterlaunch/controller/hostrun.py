"""One host's part of a running job, as the supervisor holds it.

The pure part (what the verdict needs) is :class:`~clusterlaunch.core.outcome.HostState`;
this adds what only the running controller has: the connection, the agent's
process on it, the decoder of its frames and the watch on its ``setup:``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.outcome import HostState
from clusterlaunch.core.setupguard import SetupWatch
from clusterlaunch.transport.base import Connection, RemoteProcess


@dataclass(kw_only=True)
class HostRun(HostState):
    """A host's state plus the live objects the supervisor reads and writes."""

    connection: Connection
    process: RemoteProcess | None = None
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    setup: SetupWatch = field(init=False)
    """Its ``setup:``'s reports, read before the agent's frames."""

    def __post_init__(self) -> None:
        self.setup = SetupWatch(self.node.host, expected=bool(self.node.setup))
