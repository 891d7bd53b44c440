"""``clusterlaunch run slurm`` against a real Slurm (22.05 here): munged, slurmctld, slurmd.

The ``real_slurm`` fixture runs one slurmd on each of three network-namespace hosts
``node[0-2]``; the root namespace plays the login node where ``salloc`` runs the
controller (``sbatch`` runs it on node0, as a batch script).  Every test's job carries
its own marker in the environment (``srun --export=ALL`` hands it to every step), and
afterwards nothing may run on any node but its sshd and slurmd (found by namespace,
marked or not: slurmstepd, agents, torchrun, ranks).  The fake-srun tests in
test_fake_srun.py stay the fast tier.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from clusterlaunch.testing import find_processes, kill_processes, wait_until_gone
from tests.cluster.support import (
    PYTHON,
    WORKERS,
    cli_argv,
    rank_lines,
    wait_for_lines,
    write_hosts,
)
from tests.slurm.real import MARKS, SlurmCluster

pytestmark = [getattr(pytest.mark, name) for name in MARKS]

# 2 + 2 + 1 processes: Slurm spreads -n5 over three 2-CPU nodes as SLURM_TASKS_PER_NODE
# "2(x2),1" (with other CPU counts the layout differs; the comparison with SSH holds).
TASKS = ("-N3", "-n5")
FAILING = ("--env", "FAIL_RANK=4", "--env", "FAIL_CODE=7")
STOPPED = re.compile(
    r"^clusterlaunch: job stopped: (terminated \(SIGTERM\)|the agent on node\d got SIGTERM .*)$",
    re.MULTILINE,
)


def controller(*args: str) -> list[str]:
    """``python -m clusterlaunch COMMAND --python PYTHON ARGS`` (python3 there may lack torch)."""
    return [PYTHON, "-m", "clusterlaunch", args[0], "--python", PYTHON, *args[1:]]


class Launch:
    """A command started on the login node (salloc, sbatch, ...), stderr kept in a file."""

    def __init__(self, slurm: SlurmCluster, marker: str, tmp_path: Path) -> None:
        self.slurm, self.marker = slurm, marker
        self.stderr_path = tmp_path / f"stderr-{secrets.token_hex(3)}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, argv: Sequence[str], **env: str) -> subprocess.Popen[bytes]:
        with self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                list(argv), cwd=WORKERS, stdout=subprocess.PIPE, stderr=err,
                env=self.slurm.env(CLUSTERLAUNCH_SIM_HOST=self.marker, **env),
                start_new_session=True,  # as from a terminal of its own
            )  # fmt: skip
        return self.process

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def job_id(self) -> str:
        """The allocation salloc was granted (from its "Granted job allocation N")."""
        found = re.search(r"Granted job allocation (\d+)", self.stderr())
        assert found, self.stderr()
        return found[1]

    def controller_pid(self) -> int:
        """The controller: salloc's child, which salloc put in a process group of its own."""
        assert self.process is not None
        [child] = [p for p in find_processes([self.marker]) if p.ppid == self.process.pid]
        assert child.pgid == child.pid  # a terminal's Ctrl-C would reach this group only
        return child.pid

    def end(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def launch(real_slurm: SlurmCluster, tmp_path: Path) -> Iterator[Launch]:
    """A fresh marker for the test's jobs; afterwards nothing may run on any node."""
    started = Launch(real_slurm, f"slurmjob-{secrets.token_hex(4)}", tmp_path)
    yield started
    started.end()
    left = wait_until_gone([started.marker, *real_slurm.net.markers()], timeout=15)
    kill_processes(left)
    strays = real_slurm.strays(timeout=15)
    if left or strays:
        found = [str(p) for p in left] + strays
        pytest.fail(f"left running after the test (killed): {found}", pytrace=False)


def wait_for_ranks(process: subprocess.Popen[bytes], count: int, timeout: float = 120) -> None:
    wait_for_lines(process, b" up", count, timeout=timeout)


def test_each_slurmd_is_its_own_node(real_slurm: SlurmCluster, launch: Launch, record_property):
    record_property("slurm_cluster_start_s", real_slurm.start_seconds)
    process = launch.start(["srun", *TASKS[:1], "--label", "hostname"])
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, launch.stderr()
    assert sorted(out.decode().split("\n")[:-1]) == ["0: node0", "1: node1", "2: node2"]


@pytest.mark.torch
def test_salloc_job_runs_as_over_ssh(
    real_slurm: SlurmCluster, launch: Launch, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 2), ("node2", 1)])
    over_ssh = subprocess.run(
        cli_argv("run", real_slurm.net, *FAILING, str(hosts), "allreduce.py", "x y"),
        cwd=WORKERS, capture_output=True, text=True, timeout=180, env=real_slurm.env(),
    )  # fmt: skip
    process = launch.start(
        ["salloc", *TASKS, *controller("run", *FAILING, "slurm", "allreduce.py", "x y")]
    )
    out, _ = process.communicate(timeout=180)
    over_slurm = out.decode()
    # salloc exits with its command's status: the failing rank's own code, as over SSH.
    assert (process.returncode, over_ssh.returncode) == (7, 7), launch.stderr() + over_ssh.stderr
    lines = sorted(rank_lines(over_slurm))
    assert lines == sorted(rank_lines(over_ssh.stdout))
    assert [(rank, host, local) for rank, host, local, _ in lines] == [
        (0, "node0", 0), (1, "node0", 1), (2, "node1", 0), (3, "node1", 1), (4, "node2", 0)
    ]  # fmt: skip
    for rank, _host, _local, text in lines:
        assert f"RANK={rank} " in text and "WORLD_SIZE=5 " in text and "SUM=15" in text
        assert f"LOCAL_WORLD_SIZE={1 if rank == 4 else 2} " in text and 'ARGV=["x y"]' in text
    summary = "clusterlaunch: job failed: rank 4 on node2 exited with code 7"
    assert summary in launch.stderr() and summary in over_ssh.stderr


@pytest.mark.torch
@pytest.mark.parametrize(("signum", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_to_the_controller_end_the_job_everywhere(
    launch: Launch, signum: int, expected: int
) -> None:
    process = launch.start(
        ["salloc", *TASKS, *controller("run", "--grace", "2", "slurm", "sleeper.py")]
    )
    wait_for_ranks(process, 5)
    pid = launch.controller_pid()
    if signum == signal.SIGINT:
        os.killpg(pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground group
    else:
        os.kill(pid, signal.SIGTERM)
    assert process.wait(timeout=60) == expected, launch.stderr()
    name = {130: "interrupted (Ctrl-C)", 143: "terminated (SIGTERM)"}[expected]
    assert f"clusterlaunch: job stopped: {name}" in launch.stderr()


@pytest.mark.torch
def test_scancel_of_a_batch_job(real_slurm: SlurmCluster, launch: Launch, tmp_path: Path) -> None:
    output, script = tmp_path / "batch.out", tmp_path / "batch.sh"
    command = " ".join(controller("run", "--grace", "2", "slurm", "sleeper.py"))
    script.write_text(f"#!/bin/sh\nexec {command}\n")  # as docs/slurm.md suggests
    batch = launch.start(["sbatch", "--parsable", *TASKS, "-o", str(output), str(script)])
    job_id = batch.communicate(timeout=60)[0].decode().strip()
    assert batch.returncode == 0, launch.stderr()
    wait_for_file_lines(output, " up", 5)
    subprocess.run(["scancel", job_id], env=real_slurm.env(), check=True, timeout=60)
    # Slurm sends SIGTERM to every step, the batch script (exec'd clusterlaunch) included.
    assert real_slurm.job_exit_code(job_id) == ("CANCELLED", "143:0"), output.read_text()
    assert_stopped_by_slurms_sigterm(output.read_text())


def assert_stopped_by_slurms_sigterm(text: str) -> None:
    """One reason, naming a SIGTERM: clusterlaunch's own whenever it arrives while the job
    is still ending. Slurm signals the steps and the controller in no set order, and under
    load (CI, once) the agents' SIGTERMs ended the job everywhere before clusterlaunch's own
    arrived: then an agent's is the reason, and clusterlaunch's own comes after the report."""
    reasons = STOPPED.findall(text)
    assert len(reasons) == 1, text
    late = "\nclusterlaunch: terminated (SIGTERM)\n"
    assert reasons[0] == "terminated (SIGTERM)" or late not in text or text.endswith(late), text


@pytest.mark.torch
@pytest.mark.parametrize("kill_command", [False, True], ids=["salloc", "salloc-K"])
def test_scancel_of_an_allocation(real_slurm: SlurmCluster, launch: Launch, kill_command: bool):
    salloc = ["salloc", *TASKS, *(["--kill-command=TERM"] if kill_command else [])]
    process = launch.start([*salloc, *controller("run", "--grace", "2", "slurm", "sleeper.py")])
    wait_for_ranks(process, 5)
    subprocess.run(["scancel", launch.job_id()], env=real_slurm.env(), check=True, timeout=60)
    code = process.wait(timeout=60)
    if kill_command:  # salloc passes the revocation on to clusterlaunch as SIGTERM
        assert code == 143, launch.stderr()
        assert_stopped_by_slurms_sigterm(launch.stderr())
    else:
        # Only the steps hear of it: each agent stops its part for its SIGTERM, and
        # clusterlaunch stops the job with that signal's status (see docs/slurm.md).
        assert code == 143 and re.search(
            r"clusterlaunch: job stopped: the agent on node\d got SIGTERM", launch.stderr()
        ), launch.stderr()
    assert "revoked" in launch.stderr()


def test_outside_an_allocation(real_slurm: SlurmCluster, launch: Launch) -> None:
    process = launch.start(controller("run", "slurm", "allreduce.py"))
    out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (2, b"")
    assert launch.stderr() == (
        "clusterlaunch: error: not inside a Slurm allocation (SLURM_JOB_NODELIST unset); "
        "run under salloc/sbatch or pass a hosts file\n"
    )


def test_no_srun_on_path_inside_an_allocation(launch: Launch, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    without_srun = ["/usr/bin/env", f"PATH={tmp_path / 'bin'}"]
    process = launch.start(
        ["salloc", "--quiet", *TASKS, *without_srun, *controller("run", "slurm", "allreduce.py")]
    )
    out, _ = process.communicate(timeout=60)
    assert (process.returncode, out) == (2, b"")
    assert launch.stderr() == (
        "clusterlaunch: error: srun not found on PATH: add Slurm's bin directory to PATH, "
        "or use --transport ssh\n"
    )


@pytest.mark.torch
def test_a_killed_slurmd(real_slurm: SlurmCluster, launch: Launch) -> None:
    """Last: the node is down until its slurmd is back (restarted at the end)."""
    args = ("run", "--grace", "2", "--heartbeat-timeout", "5", "slurm", "sleeper.py")
    process = launch.start(["salloc", *TASKS, *controller(*args)])
    try:
        wait_for_ranks(process, 5)
        real_slurm.kill_slurmd("node1")  # its slurmstepd and the job there live on
        code = process.wait(timeout=120)
    finally:
        real_slurm.start_slurmd("node1")
    stderr = launch.stderr()
    # Slurm declares node1 failed (SlurmdTimeout) and cancels every step of the job:
    # node1's slurmstepd lives on, so its step too. The agents get SIGTERM (then
    # SIGKILL): the job stops with 143, naming the first agent heard of. Should
    # node1's srun end first, with 0 and no report (seen in an earlier session), that
    # is a lost host: 255. Either way nothing is left on any node (the fixture checks).
    assert "salloc: error: Node failure on node1" in stderr
    stopped = re.search(r"clusterlaunch: job stopped: the agent on node\d got SIGTERM", stderr)
    lost = "clusterlaunch: job failed: host node1 was lost" in stderr
    assert (code == 143 and stopped) or (code == 255 and lost), stderr
    real_slurm.wait_idle(timeout=60)


def wait_for_file_lines(path: Path, needle: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text(errors="replace").count(needle) >= count):
        assert time.monotonic() < deadline, path.read_text() if path.exists() else "no output"
        time.sleep(0.1)


LEFT_SRUNS = (
    "import sys; from clusterlaunch.testing import find_processes; "
    "print([p.cmdline for p in find_processes([sys.argv[1]]) if 'srun' in p.cmdline.split()[0]])"
)


def test_a_failed_check_leaves_no_srun_behind(real_slurm: SlurmCluster, launch: Launch) -> None:
    """When the controller has exited after a failed check, none of its srun steps is
    left, not even briefly (a hostile run once saw one end ~1 s after the controller)."""
    check = shlex.join(controller("check", "--workdir", "/tmp", "slurm", "nosuch.py"))
    after = shlex.join([PYTHON, "-c", LEFT_SRUNS, launch.marker])
    process = launch.start(["salloc", "--quiet", *TASKS, "sh", "-c", f"{check}; {after}"])
    out, _ = process.communicate(timeout=120)
    said = out.decode() + launch.stderr()
    assert "nosuch.py' not found in /tmp" in said, said  # the hosts' preflight failed
    assert out.decode().splitlines()[-1] == "[]", said
