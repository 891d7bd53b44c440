"""What one launch is asked to do: the request the command line builds.

:mod:`clusterlaunch.controller.launcher` plans and runs it (and re-exports it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from clusterlaunch.core import defaults
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.restarts import RestartPolicy
from clusterlaunch.transport import SshSettings
from clusterlaunch.transport.suspension import SuspendWatch


@dataclass(frozen=True)
class JobRequest:
    """Everything needed to plan and run one job (``run``) or command (``exec``)."""

    inventory: Inventory
    targets: tuple[SshTarget, ...]
    options: LaunchOptions
    job_id: str
    ssh: SshSettings
    job_id_given: bool = False
    """``--job-id``: exec, which has no preflight, checks that no job of it runs."""
    exec_argv: tuple[str, ...] | None = None
    fanout: int = defaults.FANOUT
    timeout: float | None = None
    timeout_given: float | None = None
    """The ``--timeout`` the user gave, for messages, when ``timeout`` is what a restart left."""
    rank_filter: frozenset[int] | None = None
    log_dir: str | None = None
    fail_fast: bool = False
    """``exec --fail-fast``: stop every host when one fails (torchrun jobs always do)."""
    transport: str = "ssh"
    """``ssh`` or ``srun`` (job steps of the current Slurm allocation)."""
    sync: bool = False
    """``--sync``: copy this directory to every host's workdir before the preflight."""
    restarts: RestartPolicy = field(default_factory=RestartPolicy)
    """``--max-restarts`` and friends (controller/restarts.py runs the attempts)."""
    spares: tuple[tuple[HostSpec, SshTarget], ...] = ()
    """``spare: true`` hosts: idle until a restart needs one."""
    restart_count: int | None = None
    """This attempt's number (0 first), for a job that may restart; else None."""
    verbose: bool = False
    """``--verbose``: connection notes (retried handshakes) on the console too."""
    stall_timeout: float | None = None
    stall_action: str = "stacks"
    """``--stall-timeout``/``--stall-action`` (controller/stall.py)."""
    started: float = field(default_factory=time.monotonic)
    """When the job was asked for (``time.monotonic()``; a restart keeps it): a
    ``clusterlaunch kill`` of its id after this keeps it from starting (remote/gate.py)."""
    suspensions: SuspendWatch = field(default_factory=SuspendWatch, compare=False, repr=False)
    """This controller's own suspensions (Ctrl-Z), one watch for the whole command: its
    handshakes, ``--sync``, preflight and job, every attempt (a restart keeps it)."""
