"""Take the Python stacks of a running job's workers on every host (jobctl ``stacks``).

Two callers: ``clusterlaunch stacks HOSTS JOB_ID`` (hosts from the hosts
file, as ``ps``/``kill``), and ``run --stall-timeout`` (the running job's own
plan and connections). Either way jobctl runs under the job's shell prefix
with the job's Python, so it finds py-spy where the job's environment has it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

from clusterlaunch.controller import jobs
from clusterlaunch.controller.batch import Batch
from clusterlaunch.controller.setups import wait_guarded
from clusterlaunch.core import commands, setupguard
from clusterlaunch.core.defaults import FANOUT, SETUP_TIMEOUT_S
from clusterlaunch.core.model import HostSpec, JobPlan, NodePlan, SshTarget
from clusterlaunch.core.reports import Unanswered
from clusterlaunch.core.stacks import StackDump, dumps_from_records, notes_from_records
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection

DUMP_TIMEOUT_S = 30.0  # py-spy dump of one process; ~0.1 s measured here


def stacks_of_job(
    specs: Sequence[HostSpec],
    targets: Sequence[SshTarget],
    connections: Mapping[str, Connection],
    job_id: str,
    python: str | None = None,
    setup_timeout: float = SETUP_TIMEOUT_S,
    fanout: int = FANOUT,
) -> tuple[list[StackDump], list[tuple[str, str]], list[Unanswered]]:
    """``clusterlaunch stacks``: dumps by rank, hosts without py-spy, hosts not asked."""
    args = ["stacks", job_id, "--timeout", str(DUMP_TIMEOUT_S)]
    answers, unanswered = jobs.ask_jobctl(
        specs, connections, args, python, DUMP_TIMEOUT_S + 30, setup_timeout, fanout
    )
    records = [(jobs.attribute(record, alias, targets), record) for alias, record in answers]
    return dumps_from_records(records), notes_from_records(records), unanswered


def node_command(node: NodePlan, job_id: str) -> str:
    """jobctl ``stacks`` for one node of a running plan, under the job's own prefix."""
    size = len(program_payload("jobctl"))
    python = commands.HostPath(node.python)
    argv = [*commands.bootstrap_argv(python, "jobctl", size, site=False), "stacks", job_id]
    argv += ["--timeout", str(DUMP_TIMEOUT_S)]
    return commands.shell_command(node.workdir, node.setup, node.env, argv, node.setup_guard)


def stacks_of_plan(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    fanout: int = FANOUT,
    give_up: threading.Event | None = None,
) -> tuple[list[StackDump], list[tuple[str, str]]]:
    """The stacks of ``plan``'s running job, over its own connections (``--stall-timeout``);
    ``give_up`` set: stop waiting for the hosts (the job has ended)."""
    batch_jobs = {
        node.host: (connections[node.host], node_command(node, plan.job_id)) for node in plan.nodes
    }
    batch = Batch(batch_jobs, stdin=program_payload("jobctl"), fanout=fanout)
    with_setup = {node.host for node in plan.nodes if node.setup}
    stop = give_up.is_set if give_up is not None else (lambda: False)
    finished = wait_guarded(batch, DUMP_TIMEOUT_S + 30, with_setup, stop)
    records: list[tuple[str, dict[str, Any]]] = []
    for node in plan.nodes:
        result = finished.get(node.host)
        if result is None:
            continue
        watch = setupguard.SetupWatch(node.host, expected=bool(node.setup))
        records += [(node.host, r) for r in jobs.jobctl_records(watch.feed(result.out))]
    return dumps_from_records(records), notes_from_records(records)
