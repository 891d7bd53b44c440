"""A scripted host behind a ``setup:`` (see :mod:`clusterlaunch.testing.fakes`).

A setup's shell runs before the agent, and the controller ends a stuck one by
opening another channel to run its kill (``controller/setups.py``): this host
records those kills, so a test can count them and read their PID and token.
"""

from __future__ import annotations

from clusterlaunch.testing.agentscript import Exit, FakeAgent
from clusterlaunch.testing.fakes import FakeClock, FakeConnection, FakeProcess


class SetupHost(FakeConnection):
    """A host whose program waits behind a ``setup:``; the setup kills sent to it, recorded.

    Its first ``agents`` channels play ``agent``; every later one is a kill
    (:func:`clusterlaunch.controller.setups.kill_setups`), kept in ``kills``, and
    plays ``kill`` (by default: exits 0 at once).
    """

    def __init__(
        self,
        host: str,
        agent: FakeAgent | None = None,
        clock: FakeClock | None = None,
        kill: FakeAgent | None = None,
        agents: int = 1,
    ) -> None:
        super().__init__(host, agent, clock)
        self.kill = kill or FakeAgent([Exit(0)])
        self.agents = agents
        self.kills: list[str] = []

    def start(self, command: str, stdin: bytes = b"") -> FakeProcess:
        """The agent's channel, or a kill's."""
        if len(self.processes) < self.agents:
            return super().start(command, stdin)
        self.kills.append(command)
        return FakeProcess(self, self.kill)
