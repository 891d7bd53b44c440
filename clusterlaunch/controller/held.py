"""``run``'s preflight: the agents check their own hosts, then start the job on the go.

One SSH session and one interpreter start per host for a whole ``run``. Each
host's agent is started with the preflight's options (the probe's checks,
:mod:`clusterlaunch.remote.gate`); it reports its checks as the probe would,
so the verdicts and the table are :mod:`clusterlaunch.controller.preflight`'s,
word for word. Then it waits: a host that failed gets no go (its channel is
closed); when every host passed, each gets the final job (the master port and
``gpus: auto`` counts filled in) and the supervisor adopts the running agents.

Measured before this (issue 17): the separate probe cost every host a second
SSH session and a second interpreter start, about +1 s on pytorch/examples'
multi-node DDP tutorial.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping

from clusterlaunch.controller.hostrun import HostRun
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.preflight import check_hosts, judge_all
from clusterlaunch.controller.probes import ProbeRun
from clusterlaunch.core.checkplan import checking_agent_command, go_wait, preflight_bound
from clusterlaunch.core.defaults import FANOUT, PREFLIGHT_TIMEOUT_S, SETUP_TIMEOUT_S
from clusterlaunch.core.model import JobPlan, NodePlan, ScriptKind
from clusterlaunch.core.reports import PreflightResult
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.suspension import SuspendWatch


class HeldAgents:
    """Every host's agent, checked and waiting for its go."""

    def __init__(
        self, plan: JobPlan, runs: list[ProbeRun], result: PreflightResult, started: float
    ) -> None:
        self.plan = plan
        self.runs = runs
        self.result = result
        self.started = started
        """When the job was asked for (monotonic): the go says how long ago."""
        self._handed_over = False

    def hand_over(self, plan: JobPlan, hosts: list[HostRun], router: OutputRouter) -> None:
        """Send every agent its final job (``plan``: the preflight's, resolved) and give it
        to the supervisor's ``hosts``: its decoder is past the preflight's reports, its
        setup done; what the host printed before (the setup's words) is shown first."""
        for run, host in zip(self.runs, hosts, strict=True):
            assert run.process is not None  # the preflight passed: every agent reported
            job = json.dumps(_final_job(run.report.node, host.node, self.started))
            run.process.send(f"go {job}\n".encode())
            host.process, host.decoder, host.setup = run.process, run.decoder, run.setup
            _show_early(router, host.node.host, run.early)
        self._handed_over = True

    def close(self) -> None:
        """No go for anyone (a failed preflight, an interrupt): every agent ends, nothing starts."""
        if self._handed_over:
            return
        for run in self.runs:
            if run.process is not None:
                run.process.close()


def _show_early(router: OutputRouter, host: str, early: list[tuple[bool, bytes]]) -> None:
    """What ``host`` printed before its agent: ssh's or srun's own on stderr, the shell's
    (a login file, the setup) on stdout, each on lines of its own, all of it there."""
    last = max((at for at, (is_stderr, _) in enumerate(early) if not is_stderr), default=-1)
    for at, (is_stderr, data) in enumerate(early):
        if is_stderr:
            router.transport_output(host, data)
        else:
            router.shell_output(host, data, ended=at == last)


def hold_preflight(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    script: str | None,
    timeout: float = PREFLIGHT_TIMEOUT_S,
    setup_timeout: float = SETUP_TIMEOUT_S,
    notify: Callable[[str], None] | None = None,
    fanout: int = FANOUT,
    script_kind: ScriptKind = "file",
    progress: Callable[[str], None] | None = None,
    limit: float | None = None,
    started: float | None = None,
    awake: SuspendWatch | None = None,
) -> HeldAgents:
    """Start every host's agent in its preflight; never raises for a host problem.

    The caller owns the result: :meth:`HeldAgents.go` or :meth:`HeldAgents.close`.
    ``progress`` hears of each host whose checks are done. ``limit``: at most this many
    seconds in all, setups included. ``started``: when the job was asked for (monotonic;
    default now): an agent that finds a ``clusterlaunch kill`` since then does not start.
    ``awake``: the command's :class:`SuspendWatch` (the supervisor's too).
    """
    payload = program_payload("agent")
    nonce = secrets.token_hex(8)
    timeout = preflight_bound(plan, setup_timeout, timeout, limit)

    def command(node: NodePlan, listen: int | None) -> str:
        return checking_agent_command(
            node, plan.master_addr, listen, nonce, script, go_wait(timeout), script_kind
        )

    runs = [ProbeRun(node, connections[node.host], script) for node in plan.nodes]
    held = HeldAgents(
        plan, runs, PreflightResult([], None), time.monotonic() if started is None else started
    )
    try:
        port = check_hosts(
            plan, runs, command, payload, timeout, notify, fanout, True, progress, awake
        )
    except BaseException:
        held.close()
        raise
    held.result = judge_all(runs, port)
    return held


def _final_job(checked: NodePlan, final: NodePlan, started: float) -> dict[str, object]:
    """What the go tells an agent: the job as it is now planned, the variables it drops, and
    how long ago the job was asked for (a span: the hosts' clocks may differ from ours)."""
    return {
        "argv": list(final.argv),
        "first_rank": final.first_rank,
        "env": dict(final.env),
        "unset": [name for name in checked.env if name not in final.env],
        "since": round(time.monotonic() - started, 3),
    }
