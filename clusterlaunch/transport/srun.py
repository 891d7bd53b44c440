"""srun transport: each host's command runs as a one-task step of the current Slurm job.

``start`` runs ``srun --nodes=1 --ntasks=1 -w HOST ... SHELL -c COMMAND`` as a
local child with pipes, wrapped in the same :class:`LocalProcess` as the local
transport: srun relays the step's stdout/stderr to our pipes and our pipe to
the step's stdin, so the supervisor and preflight work unchanged.

Stdin carries everything the agent needs: the program source, heartbeats,
``t``/``k`` and EOF. srun forwards stdin as it arrives (no line buffering) and
turns EOF on its stdin into EOF on the task's stdin. ``--input=all`` is srun's
default, but passed explicitly so that ``SRUN_INPUT`` in the user's environment
cannot redirect it; with one task, "all" and "task 0" are the same task.
Output is framed binary and must arrive as written: by default slurmstepd
holds a task's partial stdout line until its newline, and a frame's payload
ends without one, so the probe's first report sat in slurmstepd while the
probe waited for the controller's answer to it (every preflight over srun
timed out). ``--unbuffered`` makes slurmstepd pass each read on at once; it
gives the task's stdout a pseudo-terminal, which Slurm sets raw: 4 MiB of
random bytes came through unchanged here (Slurm 22.05.8), stdin and stderr
stay pipes, and neither the probe nor the agent asks whether stdout is a
terminal (the job's own output reaches the agent through pipes).

Teardown, by how the controller ends:

* normally, Ctrl-C, SIGTERM, SIGHUP: the supervisor sends ``t`` (then ``k``);
  the agent stops the job, reports and exits; the step and srun end with it,
  and closing the connection waits for that (``SrunConnection.close``).
  srun runs in its own session, so a terminal's Ctrl-C never reaches it: srun
  answers SIGINT with a status line, and two within a second kill the step
  with no grace.
* SIGKILL: our end of srun's stdin closes, srun forwards EOF, and the agent
  starts its graceful teardown. srun's next write to its dead stdout raises
  SIGPIPE, which srun turns into SIGKILL of the step (the whole step, through
  Slurm's process tracking), so the job ends either way. Should srun itself be
  stuck, the agent's ``--heartbeat-timeout`` still ends the job.
* SIGTERM/SIGHUP sent to srun itself (not our doing): srun SIGKILLs the step.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from clusterlaunch.core import slurmnodes
from clusterlaunch.core.commands import for_login_shell
from clusterlaunch.core.errors import HostProblem, TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.local import LocalProcess, end_processes, login_shell

SRUN = "srun"
SRUN_MISSING = "srun not found on PATH: add Slurm's bin directory to PATH, or use --transport ssh"

# Why each flag (see docs/slurm.md):
STEP_OPTIONS = (
    "--nodes=1",
    "--ntasks=1",  # one agent per host; it starts torchrun, which starts the ranks
    "--kill-on-bad-exit=1",  # a failed task ends its step at once
    "--overlap",  # never queue behind another step (an interactive shell, a previous probe)
    "--cpu-bind=none",  # one task must not be pinned to one CPU: its ranks need them all
    "--export=ALL",  # sbatch --export=NONE leaves SLURM_EXPORT_ENV=NONE behind
    "--input=all",  # stdin is the agent's control channel; ignore SRUN_INPUT
    "--output=all",
    "--error=all",
    "--quiet",  # no "srun: job step created" lines among the job's output
    "--unbuffered",  # no holding output until a newline: frames end without one
)

# Removed from srun's environment, which srun would read as options:
# SLURM_LABELIO (--label) would prefix the agent's framed output; the job's
# GPU total (--gpus=32) cannot fit a one-node step; and the job's per-task
# layout (sbatch --ntasks-per-node=8 --gpus-per-task=1) would shrink our
# single task per node to one task's share.
DROPPED_ENV = (
    "SLURM_LABELIO",
    "SLURM_GPUS",
    "SLURM_GPUS_PER_TASK",
    "SLURM_TRES_PER_TASK",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS_PER_GPU",
    "SLURM_NTASKS_PER_CORE",
    "SLURM_NTASKS_PER_SOCKET",
)


def srun_argv(host: str, command: str, shell: str, job_id: str, srun: str = SRUN) -> list[str]:
    """The argv that runs ``command`` with ``shell`` on Slurm node ``host``, a step of
    job ``job_id`` (named, not left to SLURM_JOB_ID: without one srun makes a new job)."""
    return [srun, f"--jobid={job_id}", *STEP_OPTIONS, "-w", host, shell, "-c", command]


# srun's own line when the task exits non-zero ("srun: error: gpu07: task 0: Exited with
# exit code 5"): written to the same stderr as the task's, and so joined to a last line
# the command left without a newline; the job's outcome says it already.
_EXIT_NOTE = re.compile(
    rb"^srun: error: [^\n:]+: task [0-9]+: Exited with exit code [0-9]+\n", re.M
)


def without_exit_notes(block: bytes) -> bytes:
    """``block`` (whole lines of srun's stderr) without srun's notes of the task's exit."""
    return _EXIT_NOTE.sub(b"", block) if b"Exited with exit code" in block else block


def srun_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without the variables that would change how srun runs our one task."""
    return {name: value for name, value in env.items() if name not in DROPPED_ENV}


class SrunConnection:
    """One Slurm node, reached by starting job steps on it.

    There is no link to keep alive: a node that fails ends srun (Slurm notices
    and says so on srun's stderr), which the supervisor sees as the host's
    process ending without a report.
    """

    inherits_environment = "srun passes to the job steps (--export=ALL)"
    """Its steps start with this shell's environment: the preflight names that source."""

    def __init__(self, host: str, job_id: str, srun: str = SRUN) -> None:
        self.host = host
        self._job_id = job_id
        self._srun = srun
        self._processes: list[LocalProcess] = []

    def start(self, command: str, stdin: bytes = b"") -> LocalProcess:
        """Start ``command`` as a step on this node; ``stdin`` is written first.

        The command and the agent (81 KB) are more than the 64 KiB pipe buffer holds, so
        this write waits for the step to take its stdin; start_all makes it in a thread of
        its own for each host, so the steps still start together.
        """
        line, sent = for_login_shell(command, stdin)
        argv = srun_argv(self.host, line, login_shell(), self._job_id, self._srun)
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=srun_env(os.environ),
                # See the module docstring: Ctrl-C is the controller's to handle.
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(self.host, f"cannot run {self._srun}: {exc}") from None
        process = LocalProcess(popen)
        self._processes.append(process)
        process.send(sent)
        return process

    def alive(self) -> bool:
        """Always True: losing a node shows as its srun ending, not as a dead link.

        (Tying this to one srun process would misreport a step that exited
        while its last output was still being read as a lost host.)
        """
        return True

    def close(self) -> None:
        """EOF to every step (their agents tear down, as over SSH), and srun waited
        for (:func:`end_processes`): the controller exits with no step of its own left.

        (With EOF alone, node 0's probe step of a failed ``check`` outlived the
        controller by up to ~1 s, 1 run in 4-14 on a loaded machine.) A step still
        there after the wait gets srun's SIGTERM, which SIGKILLs the step.
        """
        end_processes(self._processes)


def connect_all(
    targets: Sequence[SshTarget],
) -> tuple[dict[str, SrunConnection], list[HostProblem]]:
    """One connection per target (nothing is contacted yet); every host fails without srun.

    The job id was checked before anything started (clusterlaunch.cli.slurm.hosts).
    """
    srun = shutil.which(SRUN)
    if srun is None:
        return {}, [HostProblem(target.alias, "connect", SRUN_MISSING) for target in targets]
    job = slurmnodes.job_id(os.environ)
    return {target.alias: SrunConnection(target.alias, job, srun) for target in targets}, []
