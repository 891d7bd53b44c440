"""A real Slurm (tests/slurm/real.py): allocations whose environment misleads srun.

Each is refused in one line before any step starts, and no job of its own is made:
``squeue`` lists only the allocation the test runs in.
"""

from __future__ import annotations

import shlex

import pytest

from tests.slurm.real import MARKS, SlurmCluster
from tests.slurm.test_real_slurm import Launch, controller, launch  # noqa: F401

pytestmark = [getattr(pytest.mark, name) for name in MARKS]

SQUEUE = "squeue --noheader --format=%i"


def run_in_salloc(launch: Launch, script: str) -> tuple[int, list[str]]:  # noqa: F811
    """``script`` under ``salloc -N1 -n2``; its exit status and its stdout's lines."""
    process = launch.start(["salloc", "--quiet", "-N1", "-n2", "sh", "-c", script])
    out, _ = process.communicate(timeout=120)
    return process.returncode, out.decode().splitlines()


def test_no_job_id_starts_no_new_job(
    real_slurm: SlurmCluster,
    launch: Launch,  # noqa: F811
) -> None:
    """Without SLURM_JOB_ID, srun would make a new one-node job for every node."""
    exec_ = shlex.join(controller("exec", "slurm", "--", "sh", "-c", "echo job=$SLURM_JOB_ID"))
    script = f'unset SLURM_JOB_ID SLURM_JOBID; {exec_}; echo "rc=$?"; {SQUEUE} | wc -l'
    code, lines = run_in_salloc(launch, script)
    assert code == 0 and lines == ["rc=2", "1"], (lines, launch.stderr())
    assert launch.stderr().startswith(
        "clusterlaunch: error: not inside a Slurm allocation (SLURM_JOB_ID unset, though "
        "SLURM_JOB_NODELIST is set: srun would make a new job for every node)"
    ), launch.stderr()
    assert len(launch.stderr().splitlines()) == 1, launch.stderr()


def test_inside_a_step_the_steps_task_count_is_not_used(
    real_slurm: SlurmCluster,
    launch: Launch,  # noqa: F811
) -> None:
    """salloc -n2, then srun -n1: SLURM_TASKS_PER_NODE=1 is the step's, not the job's."""
    dry = shlex.join(controller("run", "--dry-run", "slurm", "allreduce.py"))
    given = shlex.join(controller("run", "--dry-run", "--gpus-per-host", "2", "slurm", "x.py"))
    inner = f'{dry}; echo "rc=$?"; {given} | grep -c "world size 2,"'
    code, lines = run_in_salloc(launch, f"srun -N1 -n1 sh -c {shlex.quote(inner)}")
    assert code == 0 and lines == ["rc=2", "1"], (lines, launch.stderr())
    assert (
        "clusterlaunch: error: inside a job step (SLURM_STEP_ID='0'), whose "
        "SLURM_TASKS_PER_NODE and SLURM_GPUS_ON_NODE are the step's counts"
    ) in launch.stderr()
