"""A real Slurm (tests/slurm/real.py): allocations whose environment misleads srun.

Each is refused in one line before any step starts, and no job of its own is made:
``squeue`` lists only the allocation the test runs in.
"""

from __future__ import annotations

import shlex
from pathlib import Path

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


def test_srun_says_nothing_into_the_commands_output(
    real_slurm: SlurmCluster,
    launch: Launch,  # noqa: F811
    tmp_path: Path,
) -> None:
    """srun writes its own lines to the stderr the task's comes through: its note of the
    exit status ("task 0: Exited with exit code 5") joined the command's last line."""
    logs = tmp_path / "logs"
    script = 'printf "a\\nb-nonl"; printf "e-nonl" >&2; sleep 0.2; exit 5'
    exec_ = shlex.join(
        controller("exec", "--log-dir", str(logs), "slurm", "--", "sh", "-c", script)
    )
    code, lines = run_in_salloc(launch, f'{exec_}; echo "rc=$?"')
    stderr = launch.stderr()
    assert code == 0 and lines == ["[node0] a", "[node0] b-nonl", "rc=5"], (lines, stderr)
    assert "\n[node0] e-nonl\n" in stderr and "Exited with exit code" not in stderr, stderr
    assert "clusterlaunch: job failed: 1 of 1 host(s) failed: node0 (5)" in stderr
    assert "\n  | e-nonl\n" in stderr  # the failure summary's last lines of node0
    assert (logs / "node-0.log").read_bytes() == b"a\nb-nonle-nonl"  # the command's bytes
    assert "Exited with exit code" not in (logs / "controller.log").read_text()


def test_ps_and_kill_a_slurm_job_over_ssh(
    real_slurm: SlurmCluster,
    launch: Launch,  # noqa: F811
) -> None:
    """docs/slurm.md's recipe: the allocation's nodes into a hosts file, then ps and kill
    over SSH (they take no HOSTS=slurm: one line, exit 2)."""
    config = str(real_slurm.net.ssh_config)
    exec_ = shlex.join(controller("exec", "--job-id", "viassh", "slurm", "--", "sleep", "60"))
    ps, kill = (shlex.join([*controller(c, "--ssh-config", config), *a]) for c, a in
                (("ps", ["nodes.txt"]), ("kill", ["nodes.txt", "viassh"])))  # fmt: skip
    word = shlex.join(controller("ps", "slurm"))
    script = (
        f'cd "$(mktemp -d)"; {word}; echo "word=$?"; {exec_} & '
        'scontrol show hostnames "$SLURM_JOB_NODELIST" > nodes.txt; '
        f"until {ps} | grep -q viassh; do sleep 0.2; done; {ps} | grep -c viassh; "
        f'{kill} >/dev/null; echo "kill=$?"; wait $!; echo "exec=$?"'
    )
    process = launch.start(["salloc", "--quiet", "-N2", "sh", "-c", script])
    out, _ = process.communicate(timeout=120)
    lines = out.decode().splitlines()
    assert process.returncode == 0, (lines, launch.stderr())
    assert lines == ["word=2", "2", "kill=0", "exec=137"], (lines, launch.stderr())
    assert launch.stderr().startswith(
        "clusterlaunch: error: ps reaches hosts over SSH only and takes a hosts file"
    ), launch.stderr()
