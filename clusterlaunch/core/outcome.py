"""How a job ended: each host's state as the controller saw it, and the verdict.

Pure functions over :class:`HostRun` records, kept apart from the supervisor's
event loop: which host failed first, whether it failed on its own or because
we tore it down, and which exit code and summary the user gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.model import JobPlan, NodePlan
from clusterlaunch.core.setupguard import SetupWatch
from clusterlaunch.transport.base import Connection, RemoteProcess

EXIT_HOST_LOST = 255
EXIT_TIMEOUT = 124
EXIT_KILLED = 137  # stopped from outside with ``clusterlaunch kill``


@dataclass
class HostRun:
    """One host's part of the job, as the controller sees it."""

    node: NodePlan
    connection: Connection
    process: RemoteProcess | None = None
    decoder: FrameDecoder = field(default_factory=FrameDecoder)
    started: dict[str, Any] | None = None
    ended: dict[str, Any] | None = None
    status: int | None = None
    lost: bool = False
    done: bool = False
    order: int = 0
    """When it ended, relative to the other hosts (1 = first)."""
    setup: SetupWatch = field(init=False)
    """Its ``setup:``'s reports, read before the agent's frames."""

    def __post_init__(self) -> None:
        self.setup = SetupWatch(self.node.host, expected=bool(self.node.setup))

    @property
    def failed_on_its_own(self) -> bool:
        """Its job ended by itself with an error (not because we tore it down).

        The agent knows whether the job exited before any teardown request,
        so its ``reason`` decides, not the controller's timing.
        """
        return self.ended is not None and self.ended.get("reason") == "exited" and self.code != 0

    @property
    def code(self) -> int:
        """The exit code the host's job reported (torchrun's or the command's)."""
        if self.ended is not None and self.ended.get("code") is not None:
            code = int(self.ended["code"])
            return 128 - code if code < 0 else code
        return self.status if self.status is not None else EXIT_HOST_LOST


def decide_outcome(
    stop: JobOutcome | None, hosts: list[HostRun], plan: JobPlan, router: OutputRouter
) -> JobOutcome:
    """The job's verdict: success, the first failing rank, a lost host, or the stop reason."""
    if stop is None:
        return _without_stop(hosts, router)
    lost = [h for h in hosts if h.lost]
    if stop.exit_code == EXIT_HOST_LOST and lost:
        first = min(lost, key=lambda h: h.order or len(hosts) + 1)
        return JobOutcome(EXIT_HOST_LOST, stop.reason, host=first.node.host)
    culprit = first_failure(hosts)
    if culprit is None or stop.stopped:
        return stop
    root = (culprit.ended or {}).get("root_cause")
    if root:
        code = int(root["exitcode"])
        rank = culprit.node.rank_of(int(root["local_rank"]))
        exit_code = 128 - code if code < 0 else code
        signal_name = f" ({root['signal']})" if root.get("signal") else ""
        return JobOutcome(
            exit_code,
            f"rank {rank} on {culprit.node.host} exited with code {exit_code}{signal_name}",
            host=culprit.node.host,
            rank=rank,
            tail=router.tails.lines(rank),
        )
    return JobOutcome(
        culprit.code,
        f"{culprit.node.host} exited with code {culprit.code}",
        host=culprit.node.host,
        tail=router.tails.lines(("host", culprit.node.host)),
    )


def first_failure(hosts: list[HostRun]) -> HostRun | None:
    """The host whose failure came first, not one we tore down.

    Hosts that failed on their own are ordered by when their failing worker
    died (the agents timestamp it), then by when the controller heard of it.
    """
    failed = [h for h in hosts if h.failed_on_its_own]
    if not failed:
        return None

    def when(host: HostRun) -> tuple[float, int]:
        root = (host.ended or {}).get("root_cause") or {}
        return (float(root.get("failed_at") or float("inf")), host.order)

    return min(failed, key=when)


def _without_stop(hosts: list[HostRun], router: OutputRouter) -> JobOutcome:
    """Every host ran to its end (``exec`` without fail-fast): report the failures."""
    failed = sorted((h for h in hosts if h.code != 0), key=lambda h: h.order)
    if not failed:
        return JobOutcome(0, "all hosts finished")
    first = failed[0]
    codes = ", ".join(f"{h.node.host} ({h.code})" for h in failed)
    return JobOutcome(
        first.code,
        f"{len(failed)} of {len(hosts)} host(s) failed: {codes}",
        host=first.node.host,
        tail=router.tails.lines(("host", first.node.host)),
    )
