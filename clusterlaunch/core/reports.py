"""What the controller's one-shot programs found on the hosts: plain records, no I/O.

Filled in by :mod:`clusterlaunch.controller.preflight` (the probe) and
:mod:`clusterlaunch.controller.jobs` (``ps``, ``kill``); shown by
:mod:`clusterlaunch.core.render`, which must not import the controller.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from clusterlaunch.core.bootstrap import could_not_start, not_a_python, too_old_python
from clusterlaunch.core.errors import HostProblem
from clusterlaunch.core.model import NodePlan
from clusterlaunch.core.outcome import job_running_text
from clusterlaunch.core.rankdisk import low_space
from clusterlaunch.core.unreported import ended_before_python, names_no_python, shell_hints

WORKER_IDENTICAL = "TORCH_ELASTIC_WORKER_IDENTICAL"
"""torchrun's variable that gives each node ranks as if every node ran this node's count."""


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
    unreadable: str = ""
    """The path of the node's record where it could not be read (cut short, overwritten):
    its agent runs, its command is unknown and its start is the agent's."""

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
    """How many nodes the job has (its record's); None for an older agent's ``exec``, unsaid."""


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


def shell_failure(python: str, status: int, tail: str, said: str = "") -> str:
    """A host's shell that ended before Python started, and why if we can tell
    (:func:`~clusterlaunch.core.unreported.shell_hints`; a ``python:`` that is no Python,
    or a Python the host's environment broke, from all it ``said``)."""
    if status == 0:
        return ended_before_python(False, tail)
    too_old = too_old_python(tail) or could_not_start(python, status, said)
    if too_old is not None:
        return too_old
    if names_no_python(status, False, tail):
        return not_a_python(python, status)
    who = "srun" if tail.startswith("srun: error:") else "the shell"  # a step refused
    said = f"{who} failed before Python started (exit {status}): {tail or 'no output'}"
    return said + shell_hints(tail)


def host_problems(
    static: dict[str, Any], inherited: Collection[str] = (), inherits: str | None = None
) -> list[str]:
    """What the host's own state has against the job: a clash, an option its torchrun
    does not have (it printed its usage on every host), torchrun's variables in its
    environment (``PET_TEE=3`` printed every line twice, ``PET_STANDALONE=1`` hung the job,
    ``TORCH_ELASTIC_WORKER_IDENTICAL=1`` gave wrong ranks and a hang; ``--env`` refuses
    them, a host's login files or ``setup:`` could still set them).

    ``inherits``: how the host got the controller's environment, whose names are
    ``inherited`` (``localhost inherits``; ``None``: it does not, an SSH host)."""
    problems = job_clashes(static)
    if static.get("limit_problem"):  # too few files or processes for the agent to start it
        problems.append(static["limit_problem"])
    if static.get("scratch_problem"):  # a read-only or full /tmp
        problems.append(static["scratch_problem"])
    elif low := low_space(static.get("rank_files")):  # room for torchrun's per-rank files?
        problems.append(low)
    if static.get("torchrun_problem"):
        problems.append(static["torchrun_problem"])
    for name in static.get("torchrun_env") or []:
        problems.append(torchrun_variable(name, inherits if name in inherited else None))
    return problems


def torchrun_variable(name: str, inherits: str | None) -> str:
    """``name`` (``PET_*``, ``TORCH_ELASTIC_WORKER_IDENTICAL``), set on a host, and where
    from: this shell's environment where the host ``inherits`` it, else the host's own."""
    if inherits is not None:
        where = f"{name} is set in this shell's environment, which {inherits}"
    else:
        where = f"{name} is set there (by its login files or setup:)"
    if name == WORKER_IDENTICAL:
        return (
            f"{where}; it makes torchrun give wrong RANK and WORLD_SIZE (and a hang) when "
            "hosts run different process counts: unset it"
        )
    return (
        f"{where}; torchrun takes its options from PET_* variables, past clusterlaunch's "
        "checks: unset it, or give the option in --torchrun-args"
    )


def job_clashes(static: dict[str, Any]) -> list[str]:
    """A job of this id already holding the host (running, or still in its preflight)."""
    running = static.get("job_running")
    return [job_running_text(running.get("node"), running.get("pid"))] if running else []
