"""How a job ended: each host's state as the controller saw it, and the verdict.

Pure functions over :class:`HostState` records, kept apart from the
supervisor's event loop (which holds them as
:class:`~clusterlaunch.controller.hostrun.HostRun`, with the connection): which
host failed first, whether it failed on its own or because we tore it down,
and which exit code and summary the user gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.exits import ExitStatus, shell_status
from clusterlaunch.core.lines import TailKeeper
from clusterlaunch.core.model import NodePlan


@dataclass
class HostState:
    """What the controller knows about one host's part of the job."""

    node: NodePlan
    started: dict[str, Any] | None = None
    """The agent's ``started`` event."""
    ended: dict[str, Any] | None = None
    """The agent's ``exit`` event: reason, code, root cause."""
    status: int | None = None
    """The exit status of the agent's channel (None: it ended without one)."""
    lost: bool = False
    done: bool = False
    order: int = 0
    """When it ended, relative to the other hosts (1 = first)."""

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
            return shell_status(int(self.ended["code"]))
        return shell_status(self.status)


def decide_outcome(
    stop: JobOutcome | None, hosts: Sequence[HostState], tails: TailKeeper
) -> JobOutcome:
    """The job's verdict: success, the first failing rank, a lost host, or the stop reason.

    ``tails`` holds the last lines of each rank and host, quoted in the summary.
    """
    if stop is None:
        return _without_stop(hosts, tails)
    lost = [h for h in hosts if h.lost]
    if stop.exit_code == ExitStatus.HOST_LOST and lost:
        first = min(lost, key=lambda h: h.order or len(hosts) + 1)
        return JobOutcome(ExitStatus.HOST_LOST, stop.reason, host=first.node.host)
    culprit = first_failure(hosts)
    if culprit is None or stop.stopped:
        return stop
    root = (culprit.ended or {}).get("root_cause")
    if root:
        rank = culprit.node.first_rank + int(root["local_rank"])
        exit_code = shell_status(int(root["exitcode"]))
        signal_name = f" ({root['signal']})" if root.get("signal") else ""
        return JobOutcome(
            exit_code,
            f"rank {rank} on {culprit.node.host} exited with code {exit_code}{signal_name}",
            host=culprit.node.host,
            rank=rank,
            tail=tails.lines(rank),
        )
    return JobOutcome(
        culprit.code,
        f"{culprit.node.host} exited with code {culprit.code}",
        host=culprit.node.host,
        tail=tails.lines(("host", culprit.node.host)),
    )


def first_failure(hosts: Sequence[HostState]) -> HostState | None:
    """The host whose failure came first, not one we tore down.

    Hosts that failed on their own are ordered by when their failing worker
    died (the agents timestamp it), then by when the controller heard of it.
    """
    failed = [h for h in hosts if h.failed_on_its_own]
    if not failed:
        return None

    def when(host: HostState) -> tuple[float, int]:
        root = (host.ended or {}).get("root_cause") or {}
        return (float(root.get("failed_at") or float("inf")), host.order)

    return min(failed, key=when)


def _without_stop(hosts: Sequence[HostState], tails: TailKeeper) -> JobOutcome:
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
        tail=tails.lines(("host", first.node.host)),
    )
