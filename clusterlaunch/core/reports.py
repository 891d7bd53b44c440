"""What the controller's one-shot programs found on the hosts: plain records, no I/O.

Filled in by :mod:`clusterlaunch.controller.preflight` (the probe) and
:mod:`clusterlaunch.controller.jobs` (``ps``, ``kill``); shown by
:mod:`clusterlaunch.core.render`, which must not import the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.core.bootstrap import not_a_python, too_old_python
from clusterlaunch.core.errors import HostProblem
from clusterlaunch.core.model import NodePlan
from clusterlaunch.core.outcome import job_running_text
from clusterlaunch.core.unreported import ended_before_python, names_no_python, shell_hints


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
    static_at: float | None = None
    """When the controller had ``static`` (``time.monotonic()``): its spans (``killed_ago``)
    are measured from then, on the host's clock, which may differ from ours."""


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
    nodes: int | None = None
    """How many nodes the job has (torchrun's ``--nnodes``); None for ``exec``'s, unsaid."""


@dataclass(frozen=True)
class Unanswered:
    """A host that could not be asked: its jobs are unknown, which is not "none"."""

    host: str
    why: str


def compare_torch(reports: list[HostReport]) -> None:
    """A problem for every host whose torch is missing or differs from node 0's."""
    versions = {r.node.host: r.static.get("torch") for r in reports if r.static}
    if not versions:
        return
    reference_host = reports[0].node.host
    reference = versions.get(reference_host)
    for report in reports:
        version = versions.get(report.node.host)
        if report.static and "torch" in report.static:
            if version is None:
                report.problems.append(
                    f"torch is not installed for {report.static.get('executable')}; "
                    "install it or set python: to an environment that has it"
                )
            elif reference is not None and version != reference:
                report.problems.append(
                    f"torch {version} differs from {reference} on {reference_host}; "
                    "use one version everywhere"
                )


def setup_failure(status: int | None, tail: str) -> str:
    """A host's ``setup:`` that did not succeed; no exit status: its connection went."""
    if status is None:
        return f"the connection was lost during setup: {tail or 'no output'}"
    if status == 0:
        return ended_before_python(True, tail)
    return f"setup failed (exit {status}): {tail or 'no output'}"


def python_not_found(python: str, status: int, tail: str) -> str:
    """A host's shell that found no ``python`` (exit 127, before anything of ours ran)."""
    return f"{python} not found (exit {status}): {tail}; fix python: or --python"


def shell_failure(python: str, status: int, tail: str) -> str:
    """A host's shell that ended before Python started, and why if we can tell
    (:func:`~clusterlaunch.core.unreported.shell_hints`; a ``python:`` that is no Python)."""
    if status == 0:
        return ended_before_python(False, tail)
    too_old = too_old_python(tail)
    if too_old is not None:
        return too_old
    if names_no_python(status, False, tail):
        return not_a_python(python, status)
    who = "srun" if tail.startswith("srun: error:") else "the shell"  # a step refused
    said = f"{who} failed before Python started (exit {status}): {tail or 'no output'}"
    return said + shell_hints(tail)


def host_problems(static: dict[str, Any]) -> list[str]:
    """What the host's own state has against the job: a clash, an option its torchrun
    does not have (it printed its usage on every host), torchrun options in its
    environment (``PET_TEE=3`` printed every line twice, ``PET_STANDALONE=1`` hung the job;
    ``--env`` refuses them, a host's login files or ``setup:`` could still set them)."""
    problems = job_clashes(static)
    if static.get("scratch_problem"):  # a read-only or full /tmp
        problems.append(static["scratch_problem"])
    if static.get("torchrun_problem"):
        problems.append(static["torchrun_problem"])
    for name in static.get("pet_env") or []:
        problems.append(
            f"{name} is set there (by its login files or setup:); torchrun takes its options "
            "from PET_* variables, past clusterlaunch's checks: unset it, or give the option "
            "in --torchrun-args"
        )
    return problems


def job_clashes(static: dict[str, Any]) -> list[str]:
    """A job of this id already holding the host (running, or still in its preflight)."""
    running = static.get("job_running")
    return [job_running_text(running.get("node"), running.get("pid"))] if running else []
