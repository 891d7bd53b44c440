"""``clusterlaunch ps`` and ``clusterlaunch kill``: find and stop running jobs on hosts.

Every agent keeps a record of its job on its host (``remote/records.py``); the
small ``jobctl`` program lists those records or asks the agents of one job to
tear it down. Nothing is ever matched by name: agents are found by record,
verified by PID and start time, and they stop their own process groups.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core import commands
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.core.planner import python_for
from clusterlaunch.remote import program_source
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.oneshot import Batch

MARK = b"@@jobctl@@ "


@dataclass(frozen=True)
class RemoteJob:
    """One node of a running job, as its host's record describes it."""

    job_id: str
    host: str
    node_rank: int
    started_at: float
    command: tuple[str, ...]
    agent_pid: int


@dataclass(frozen=True)
class KillReport:
    """What ``kill`` did to one node of the job."""

    host: str
    node_rank: int
    stopped: bool
    seconds: float


def jobctl_command(python: str, args: Sequence[str]) -> str:
    """The shell command that runs the ``jobctl`` program with ``args``."""
    argv = [
        *commands.bootstrap_argv(
            commands.HostPath(python), "jobctl", len(program_source("jobctl")), site=False
        ),
        *args,
    ]
    return commands.shell_command(None, None, {}, argv)


def list_jobs(
    specs: Sequence[HostSpec],
    targets: Sequence[SshTarget],
    connections: Mapping[str, Connection],
    python: str | None = None,
) -> list[RemoteJob]:
    """Every running clusterlaunch job on these hosts, one entry per node."""
    found: dict[tuple[str, int, int], RemoteJob] = {}
    for alias, record in _run_everywhere(specs, connections, ["list"], python, timeout=30):
        host = _attribute(record, alias, targets)
        job = RemoteJob(
            job_id=str(record["job_id"]),
            host=host,
            node_rank=int(record["node_rank"]),
            started_at=float(record["started_at"]),
            command=tuple(record.get("command", ())),
            agent_pid=int(record["agent_pid"]),
        )
        # Hosts sharing one machine (test hosts, an NFS /tmp) see the same records.
        found.setdefault((job.job_id, job.node_rank, job.agent_pid), job)
    # Job ids begin with their start time, so this lists jobs oldest first.
    return sorted(found.values(), key=lambda j: (j.job_id, j.node_rank))


def kill_job(
    specs: Sequence[HostSpec],
    targets: Sequence[SshTarget],
    connections: Mapping[str, Connection],
    job_id: str,
    python: str | None = None,
    timeout: float = 60.0,
) -> list[KillReport]:
    """Ask every agent of ``job_id`` on these hosts to tear its job down; wait for it."""
    args = ["kill", job_id, "--timeout", str(timeout)]
    reports: dict[tuple[int, int], KillReport] = {}
    for alias, record in _run_everywhere(specs, connections, args, python, timeout + 10):
        key = (int(record["node_rank"]), int(record["agent_pid"]))
        report = KillReport(
            host=_attribute(record, alias, targets),
            node_rank=key[0],
            stopped=bool(record["stopped"]),
            seconds=float(record["seconds"]),
        )
        if key not in reports or report.stopped:
            reports[key] = report
    return sorted(reports.values(), key=lambda r: r.node_rank)


def _attribute(record: Mapping[str, Any], alias: str, targets: Sequence[SshTarget]) -> str:
    """The hosts-file name of the host a record belongs to."""
    server = str(record.get("ssh_server", "")).split()
    if len(server) == 2:
        for target in targets:
            if target.hostname == server[0] and str(target.port) == server[1]:
                return target.alias
    return alias


def _run_everywhere(
    specs: Sequence[HostSpec],
    connections: Mapping[str, Connection],
    args: Sequence[str],
    python: str | None,
    timeout: float,
) -> list[tuple[str, dict[str, Any]]]:
    jobs = {
        spec.host: (
            connections[spec.host],
            jobctl_command(python_for(spec, python, sys.executable), args),
        )
        for spec in specs
    }
    results = []
    for alias, finished in Batch(jobs, stdin=program_source("jobctl")).wait(timeout).items():
        if not finished.started:
            raise TransportError(alias, finished.error or "cannot start jobctl")
        for line in finished.out.splitlines():
            if line.startswith(MARK):
                results.append((alias, json.loads(line[len(MARK) :])))
    return results
