"""What the controller's one-shot programs found on the hosts: plain records, no I/O.

Filled in by :mod:`clusterlaunch.controller.preflight` (the probe) and
:mod:`clusterlaunch.controller.jobs` (``ps``, ``kill``); shown by
:mod:`clusterlaunch.core.render`, which must not import the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.core.errors import HostProblem
from clusterlaunch.core.model import NodePlan


@dataclass
class HostReport:
    """What one host's probe found."""

    node: NodePlan
    static: dict[str, Any] = field(default_factory=dict)
    connect_error: str | None = None
    connected: bool = False
    problems: list[str] = field(default_factory=list)
    stderr: bytes = b""
    exit_status: int | None = None


@dataclass
class PreflightResult:
    """All hosts' reports, and the master port node 0 resolved."""

    reports: list[HostReport]
    master_port: int | None

    @property
    def problems(self) -> list[HostProblem]:
        """One entry per failed check, for the error summary."""
        return [
            HostProblem(report.node.host, "preflight", problem)
            for report in self.reports
            for problem in report.problems
        ]


@dataclass(frozen=True)
class RemoteJob:
    """One node of a running job, as its host's record describes it."""

    job_id: str
    host: str
    node_rank: int
    started_at: float
    command: tuple[str, ...]
    agent_pid: int
    restart_count: int | None = None
    """Which restart of the job this node runs (``--max-restarts``); None: never restarts."""

    @property
    def attempt(self) -> int:
        """1 for the first attempt, 2 after the first restart, ..."""
        return 1 + (self.restart_count or 0)


@dataclass(frozen=True)
class KillReport:
    """What ``kill`` did to one node of the job."""

    host: str
    node_rank: int
    stopped: bool
    seconds: float


@dataclass(frozen=True)
class Unanswered:
    """A host that could not be asked: its jobs are unknown, which is not "none"."""

    host: str
    why: str
