"""One exception tree for everything clusterlaunch can report.

Modules raise these; only :mod:`clusterlaunch.cli.main` turns them into messages and
exit statuses, so the mapping from "what went wrong" to "what the shell sees"
lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class ClusterlaunchError(Exception):
    """Base of every error clusterlaunch reports without a traceback."""


class UsageError(ClusterlaunchError):
    """Bad input from the user: a flag, a file, an argument. Nothing was started."""


class LimitReached(UsageError):
    """A limit of this machine (processes, threads, memory) kept clusterlaunch from starting
    a thread: one line naming the limit and its fix; exit 2, as nothing was started."""


class HostsFileError(UsageError):
    """A problem in the hosts file, located as precisely as we can.

    Rendered as ``path:line: field: problem`` so an editor can jump to it.
    """

    def __init__(self, path: str, line: int | None, field_name: str, problem: str) -> None:
        self.path = path
        self.line = line
        self.field_name = field_name
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        prefix = f"{where}: {field_name}: " if field_name else f"{where}: "
        super().__init__(prefix + problem)


@dataclass(frozen=True)
class HostProblem:
    """One host's failed check in a preflight (or connect) pass."""

    host: str
    check: str
    detail: str


class PreflightError(ClusterlaunchError):
    """At least one host failed a check before anything was started anywhere."""

    def __init__(self, problems: list[HostProblem], table: str) -> None:
        self.problems = problems
        self.table = table
        super().__init__(f"preflight failed on {len({p.host for p in problems})} host(s)")

    def report(self) -> str:
        """What the console and ``controller.log`` say: the line, then the hosts' table."""
        return f"clusterlaunch: {self}; nothing was started\n{self.table}"


class SyncError(PreflightError):
    """``--sync`` could not copy the workdir to some host; nothing was started.

    A kind of preflight failure: the CLI reports it the same way (exit 2, per-host table).
    """

    def __init__(self, problems: list[HostProblem], table: str) -> None:
        super().__init__(problems, table)
        hosts = len({p.host for p in problems})
        self.args = (f"code sync (--sync) failed on {hosts} host(s)",)


HOST_LOST = "host lost (no answer to keepalives)"
"""Why a host whose connection went silent is given up on, wherever that is noticed: the
preflight, a batch (``ps``, ``kill``, the kills of setups), a channel still opening, a job."""


class TransportError(ClusterlaunchError):
    """A host could not be reached, authenticated or talked to."""

    def __init__(self, host: str, detail: str) -> None:
        self.host = host
        self.detail = detail
        super().__init__(f"{host}: {detail}")


class HostKeyError(TransportError):
    """A host key was unknown (under strict checking) or has changed."""


class StopJob(Exception):
    """Stop the job with ``exit_code``: raised by the CLI's signal handlers, and by
    the console when its reader went away (``| head``).

    Not a :class:`ClusterlaunchError`: it is a way out, and every layer's
    ``finally`` tears down what it started on the way.
    """

    def __init__(self, exit_code: int, reason: str, signum: int | None = None) -> None:
        self.exit_code = exit_code
        self.reason = reason
        self.signum = signum
        """The signal it came from; None for a stop that is no signal (``OutputLost``)."""
        super().__init__(reason)


class OutputLost(StopJob):
    """Where the job's output goes can no longer be written: the console (``| head``, a
    closed terminal, a full disk) or a ``--log-dir`` file (a full disk).

    It stops a running job as a signal would; a teardown already under way goes
    on as it was (it is no second Ctrl-C), its output still reaching the logs.
    """


@dataclass
class JobOutcome:
    """How a job ended, as the controller observed it.

    ``exit_code`` is what the controller should exit with; the other fields feed
    the root-cause summary.
    """

    exit_code: int
    reason: str
    host: str | None = None
    rank: int | None = None
    tail: list[str] = field(default_factory=list)
    stopped: bool = False
    """clusterlaunch itself ended the job: its ``--timeout``, a signal it received,
    or ``clusterlaunch kill``; or a signal one host's agent received (``host``
    names it: Slurm's ``scancel``). Never inferred from the exit code: a rank
    that exits 124, 130, 137 or 143 by itself (an OOM-killed rank is 137) failed."""
