"""How a job ended: each host's state as the controller saw it, and the verdict.

Pure functions over :class:`HostState` records, kept apart from the
supervisor's event loop (which holds them as
:class:`~clusterlaunch.controller.hostrun.HostRun`, with the connection): which
host failed first, whether it failed on its own or because we tore it down,
and which exit code and summary the user gets.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.exits import ExitStatus, from_signal, shell_status
from clusterlaunch.core.lines import TailKeeper
from clusterlaunch.core.model import NodePlan
from clusterlaunch.core.porttaken import port_taken
from clusterlaunch.core.rankdisk import likely_cause


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
    ended_before_stop: bool = False
    """It ended while nothing had stopped the job yet (exec lets a failed host end alone)."""
    full: dict[str, Any] | None = None
    """The agent's ``full`` event: the folder of its rank files filled (``core/rankdisk.py``)."""

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
    # A node that died takes Slurm's other steps down with it: their agents'
    # SIGTERM is the consequence, the lost host the cause.
    if lost and (stop.exit_code == ExitStatus.HOST_LOST or is_host_signal(stop)):
        first = min(lost, key=lambda h: h.order or len(hosts) + 1)
        reason = stop.reason if stop.exit_code == ExitStatus.HOST_LOST else None
        return JobOutcome(
            ExitStatus.HOST_LOST, reason or f"host {first.node.host} was lost", host=first.node.host
        )
    if stop.stopped:
        return _with_earlier_failures(stop, hosts)
    culprit = first_failure(hosts)
    if culprit is None:
        return stop
    failure = _failure(culprit, tails)
    cause = likely_cause((h.node.host, h.full) for h in hosts if h.full is not None)
    return replace(failure, reason=failure.reason + cause)


def _failure(culprit: HostState, tails: TailKeeper) -> JobOutcome:
    """The first host that failed on its own: its failing rank, or the host itself."""
    root = (culprit.ended or {}).get("root_cause")
    if root:
        rank = culprit.node.rank_of(int(root["local_rank"]))
        exit_code = shell_status(int(root["exitcode"]))
        signal_name = f" ({root['signal']})" if root.get("signal") else ""
        return JobOutcome(
            exit_code,
            f"rank {rank} on {culprit.node.host} exited with code {exit_code}{signal_name}",
            host=culprit.node.host,
            rank=rank,
            tail=tails.lines(rank),
        )
    code = (culprit.ended or {}).get("code")
    if isinstance(code, int) and code < 0:  # a signal, and no rank to blame
        return _killed(culprit, -code, tails)
    tail = tails.lines(("host", culprit.node.host))
    return JobOutcome(
        culprit.code,
        f"{culprit.node.host} exited with code {culprit.code}"
        + port_taken(tail, culprit.node.argv),
        host=culprit.node.host,
        tail=tail,
    )


def _killed(host: HostState, signum: int, tails: TailKeeper) -> JobOutcome:
    """A host's job (torchrun, or ``exec``'s command) that a signal killed: not clusterlaunch,
    which says so when it kills (``kill``, a teardown); someone or something on the host."""
    torchrun = host.node.argv[1:3] == ("-m", "torch.distributed.run")
    what = "torchrun" if torchrun else "the command"
    name, where = _signal_name(signum), host.node.host
    reason = f"{what} on {where} was killed by {name}, not by clusterlaunch (exit code {host.code})"
    # torchrun's own last lines (its warnings) are not why it died; a command's may be.
    tail = [] if torchrun else tails.lines(("host", where))
    return JobOutcome(host.code, reason, host=where, tail=tail)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _with_earlier_failures(stop: JobOutcome, hosts: Sequence[HostState]) -> JobOutcome:
    """A stop (``--timeout``, Ctrl-C, ``kill``) that also names the hosts that had failed by
    themselves before it: ``exec`` without ``--fail-fast`` lets them fail without stopping.

    The status stays the stop's: it is what ended the command (a script that tests for 124
    still sees its timeout), and a failure that stopped nothing is not its cause.
    """
    failed = sorted(
        (h for h in hosts if h.ended_before_stop and h.code != 0), key=lambda h: h.order
    )
    if not failed:
        return stop
    codes = ", ".join(f"{h.node.host} ({h.code})" for h in failed)
    return replace(stop, reason=f"{stop.reason}; failed before that: {codes}")


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


def signal_stop(host: str, event: Mapping[str, Any]) -> JobOutcome | None:
    """The stop an agent's ``stopping`` event means when a signal of its own ended its part.

    Nobody on the controller's side sent it: Slurm's ``scancel`` or time limit
    (only the steps hear of it under a plain ``salloc``), a shutdown, someone's
    ``kill`` on the host. The job stops with the signal's status, 128+N, as it
    would had the controller itself got that signal. None for any other event.
    """
    reason = str(event.get("reason") or "")
    number = reason.removeprefix("signal ")
    if event.get("event") != "stopping" or number == reason or not number.isdigit():
        return None
    signum = int(number)
    return JobOutcome(
        from_signal(signum),
        f"the agent on {host} got {_signal_name(signum)} (scancel, a time limit, a shutdown?)",
        host=host,
        stopped=True,
    )


def job_running_text(node: object, pid: object) -> str:
    """A job of this id holds the host already (run's preflight; exec's agent, or asked
    ps's way before it starts)."""
    return (
        f"a job with this id is already running here (node {node}, agent pid {pid}); "
        "choose another --job-id, or clusterlaunch kill it"
    )


def id_in_use(host: str, event: Mapping[str, Any]) -> JobOutcome:
    """``exec``'s agent on ``host`` found its id held there by another job (its claim,
    remote/claims.py): the whole command stops, 2, as for bad input."""
    running = event.get("job_running") or {}
    said = job_running_text(running.get("node"), running.get("pid"))
    return JobOutcome(ExitStatus.USAGE, f"{host}: {said}", host=host)


def is_host_signal(stop: JobOutcome) -> bool:
    """Whether ``stop`` came from :func:`signal_stop` (a stop that names a host)."""
    return stop.stopped and stop.host is not None


def is_own_signal(stop: JobOutcome) -> bool:
    """Whether ``stop`` is a signal clusterlaunch itself received (Ctrl-C, SIGTERM, SIGHUP)."""
    own = (ExitStatus.INTERRUPTED, ExitStatus.TERMINATED, ExitStatus.HANGUP)
    return stop.stopped and stop.host is None and stop.exit_code in own
