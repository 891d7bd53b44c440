"""``clusterlaunch ps`` and ``clusterlaunch kill``: find and stop running jobs on hosts.

Every agent keeps a record of its job on its host (``remote/records.py``); the
small ``jobctl`` program lists those records or asks the agents of one job to
tear it down. Nothing is ever matched by name: agents are found by record,
verified by PID and start time, and they stop their own process groups. A
host that could not be asked is reported as such (:class:`Unanswered`), never
as a host without jobs.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.controller.batch import Batch, Finished
from clusterlaunch.controller.request import JobRequest
from clusterlaunch.controller.setups import wait_guarded
from clusterlaunch.core import commands, render, setupguard
from clusterlaunch.core.bootstrap import could_not_start, too_old_python
from clusterlaunch.core.defaults import FANOUT, KILL_WAIT_S, SETUP_TIMEOUT_S
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.core.outcome import job_running_text
from clusterlaunch.core.planner import python_for
from clusterlaunch.core.protocol import EVENT
from clusterlaunch.core.reports import KillReport, RemoteJob, Unanswered
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection


def jobctl_command(spec: HostSpec, python: str, args: Sequence[str], setup_timeout: float) -> str:
    """The shell command that runs ``jobctl`` with ``args`` as the job's agent ran.

    Same prefix as the job: the hosts file's ``workdir`` (else the login
    directory), ``setup`` and ``env``, so a ``python:`` that only resolves
    after the setup (``module load``, a venv on ``PATH``) resolves here too.
    """
    size = len(program_payload("jobctl"))
    argv = [*commands.bootstrap_argv(commands.HostPath(python), "jobctl", size, site=False), *args]
    guard = setupguard.SetupGuard(setup_timeout)
    return commands.shell_command(spec.workdir, spec.setup, spec.env, argv, guard)


def list_jobs(
    specs: Sequence[HostSpec],
    targets: Sequence[SshTarget],
    connections: Mapping[str, Connection],
    python: str | None = None,
    setup_timeout: float = SETUP_TIMEOUT_S,
    fanout: int = FANOUT,
) -> tuple[list[RemoteJob], list[Unanswered]]:
    """Every running clusterlaunch job on these hosts, one entry per node; who did not answer."""
    found: dict[tuple[str, int, int], RemoteJob] = {}
    ask = _Ask(["list"], python, 30, setup_timeout, fanout)
    answers, unanswered = _ask_everywhere(specs, connections, ask)
    for alias, record in answers:
        host = _attribute(record, alias, targets)
        job = RemoteJob(
            job_id=str(record["job_id"]),
            host=host,
            node_rank=int(record["node_rank"]),
            started_at=float(record["started_at"]),
            command=tuple(record.get("command", ())),
            agent_pid=int(record["agent_pid"]),
            restart_count=_whole(record.get("restart_count")),
            unreadable=str(record.get("unreadable") or ""),
        )
        # Hosts sharing one machine (test hosts, an NFS /tmp) see the same records.
        found.setdefault((job.job_id, job.node_rank, job.agent_pid), job)
    # Job ids begin with their start time, so this lists jobs oldest first.
    return sorted(found.values(), key=lambda j: (j.job_id, j.node_rank)), unanswered


def refuse_running_job(request: JobRequest, connections: Mapping[str, Connection]) -> None:
    """``exec --job-id ID``: refuse, before starting anything, an ID still running on a host.

    ``run``'s agents check this in their preflight; ``exec`` has none, and started a
    second job of the same id (``ps`` listed both, ``kill`` ended both).
    """
    specs = [spec for spec in request.inventory.hosts if spec.host in connections]
    found, _ = list_jobs(
        specs,
        request.targets,
        connections,
        request.options.python,
        request.options.setup_timeout,
        request.fanout,
    )  # a host that could not be asked: its exec fails there too, and says why
    for job in found:
        if job.job_id == request.job_id:
            raise UsageError(f"{job.host}: {job_running_text(job.node_rank, job.agent_pid)}")


def kill_job(
    specs: Sequence[HostSpec],
    targets: Sequence[SshTarget],
    connections: Mapping[str, Connection],
    job_id: str,
    python: str | None = None,
    timeout: float = KILL_WAIT_S,
    setup_timeout: float = SETUP_TIMEOUT_S,
    fanout: int = FANOUT,
) -> tuple[list[KillReport], list[Unanswered], list[str]]:
    """Ask every agent of ``job_id`` on these hosts to tear its job down; wait for it.
    Also the hosts where it was still starting (its preflight): it will not start."""
    args = ["kill", job_id, "--timeout", str(timeout)]
    reports: dict[tuple[int, int], KillReport] = {}
    ask = _Ask(args, python, timeout + 10, setup_timeout, fanout)
    answers, unanswered = _ask_everywhere(specs, connections, ask)
    starting = {
        _attribute(record, alias, targets)
        for alias, record in answers
        if record.get("event") == "starting"
    }
    for alias, record in answers:
        if record.get("event") != "killed":
            continue
        key = (int(record["node_rank"]), int(record["agent_pid"]))
        report = KillReport(
            host=_attribute(record, alias, targets),
            node_rank=key[0],
            stopped=bool(record["stopped"]),
            seconds=float(record["seconds"]),
            nodes=record["nodes"] if isinstance(record.get("nodes"), int) else None,
        )
        if key not in reports or report.stopped:
            reports[key] = report
    return sorted(reports.values(), key=lambda r: r.node_rank), unanswered, sorted(starting)


def _whole(text: Any) -> int | None:
    """A record's number written as text (an environment variable), or None."""
    return int(text) if isinstance(text, str) and text.isdigit() else None


def ask_jobctl(
    specs: Sequence[HostSpec],
    connections: Mapping[str, Connection],
    args: Sequence[str],
    python: str | None,
    timeout: float,
    setup_timeout: float = SETUP_TIMEOUT_S,
    fanout: int = FANOUT,
) -> tuple[list[tuple[str, dict[str, Any]]], list[Unanswered]]:
    """jobctl ``args`` on every host: ``(alias, record)`` answers, and who did not answer."""
    return _ask_everywhere(specs, connections, _Ask(args, python, timeout, setup_timeout, fanout))


def attribute(record: Mapping[str, Any], alias: str, targets: Sequence[SshTarget]) -> str:
    """The hosts-file name of the host a jobctl record belongs to."""
    return _attribute(record, alias, targets)


def _attribute(record: Mapping[str, Any], alias: str, targets: Sequence[SshTarget]) -> str:
    """The hosts-file name of the host a record belongs to."""
    server = str(record.get("ssh_server", "")).split()
    if len(server) == 2:
        for target in targets:
            if target.hostname == server[0] and str(target.port) == server[1]:
                return target.alias
    return alias


@dataclass(frozen=True)
class _Ask:
    """One question to jobctl on every host: its arguments and how long to wait."""

    args: Sequence[str]
    python: str | None
    timeout: float
    setup_timeout: float
    fanout: int


def _ask_everywhere(
    specs: Sequence[HostSpec], connections: Mapping[str, Connection], ask: _Ask
) -> tuple[list[tuple[str, dict[str, Any]]], list[Unanswered]]:
    """Run jobctl on every host: its records, and the hosts that gave no complete answer."""
    pythons = {spec.host: python_for(spec, ask.python, sys.executable) for spec in specs}
    jobs = {
        spec.host: (
            connections[spec.host],
            jobctl_command(spec, pythons[spec.host], ask.args, ask.setup_timeout),
        )
        for spec in specs
    }
    with_setup = {spec.host for spec in specs if spec.setup}
    batch = Batch(jobs, stdin=program_payload("jobctl"), fanout=ask.fanout)
    timeout = ask.timeout + (ask.setup_timeout if with_setup else 0)
    finished = wait_guarded(batch, timeout, with_setup)
    answers: list[tuple[str, dict[str, Any]]] = []
    unanswered = []
    for alias, result in finished.items():
        watch = setupguard.SetupWatch(alias, expected=alias in with_setup)
        records = jobctl_records(watch.feed(result.out))
        if {"event": "end"} in records:
            answers += [(alias, record) for record in records if record != {"event": "end"}]
        else:
            unanswered.append(Unanswered(alias, _why(result, watch, pythons[alias])))
    return answers, unanswered


def jobctl_records(out: bytes) -> list[dict[str, Any]]:
    """The event frames of jobctl's stdout (what the shell printed before them is ignored).

    A garbled stream ends the list where it is damaged, so its ``end`` record
    is missing and the host counts as not answered.
    """
    decoder = FrameDecoder()
    records: list[dict[str, Any]] = []
    try:
        for frame in [*decoder.feed(out), *decoder.finish()]:
            if frame.tag == EVENT:
                records.append(frame.event())
    except ValueError:  # FrameError, or an event that is not JSON
        pass
    return records


def _why(result: Finished, watch: setupguard.SetupWatch, python: str) -> str:
    """Why a host's jobctl gave no complete answer, in the user's terms."""
    detail = render.last_lines(result.err, 2)
    tail = f" ({detail})" if detail else ""
    if not result.started:
        return f"could not ask: {result.error}"
    if watch.timed_out:
        return f"could not ask: setup did not finish within {watch.limit} s (--setup-timeout)"
    if result.status is None:
        return f"could not ask: {result.error or 'the connection ended'}{tail}"
    if watch.running:
        return f"could not ask: setup failed with exit {result.status}{tail}"
    too_old = too_old_python(detail)
    if too_old is not None:
        return too_old
    if result.status == ExitStatus.NOT_STARTED:  # the shell found no such python
        return f"could not ask: {python} not found{tail}; fix python: or --python"
    if result.status == 0:
        return f"could not ask: jobctl's answer was cut short or garbled{tail}"
    broken = could_not_start(python, result.status, result.err.decode("utf-8", "replace"))
    return f"could not ask: {broken or f'jobctl failed with exit {result.status}{tail}'}"
