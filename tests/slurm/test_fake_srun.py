"""``clusterlaunch run/exec/check slurm`` end to end, over the fake srun in fake_bin/.

Each test runs the real CLI as a subprocess inside a fake two-node allocation
``node[1-2]``; the fake srun records its argv and runs each step here, marking
its processes so the fixture can prove that nothing is left running.

The node names do not resolve on this machine, so the torchrun jobs pass
``--master-addr 127.0.0.1`` (every "node" is this machine); on a real cluster
node 0's Slurm name is the default and resolves everywhere.
"""

from __future__ import annotations

import os
import select
import signal
import time
from pathlib import Path

import pytest

from clusterlaunch.transport.base import RemoteProcess
from clusterlaunch.transport.local import end_processes, login_shell
from clusterlaunch.transport.srun import STEP_OPTIONS, SrunConnection
from tests.cluster.support import PYTHON, rank_lines, wait_for_lines
from tests.slurm.conftest import FAKE_BIN, FakeSlurm

LOCAL = ("--master-addr", "127.0.0.1")


def step_hosts(fake: FakeSlurm) -> list[str]:
    return [step["host"] for step in fake.steps()]


def assert_step_argv(argv: list[str], host: str) -> None:
    """The recorded srun argv: the job (the fixture's 4242), our options, then -w HOST,
    then SHELL -c COMMAND."""
    assert argv[0] == "--jobid=4242"
    assert argv[1 : len(STEP_OPTIONS) + 1] == list(STEP_OPTIONS)
    assert argv[1:3] == ["--nodes=1", "--ntasks=1"]
    rest = argv[len(STEP_OPTIONS) + 1 :]
    assert rest[:4] == ["-w", host, login_shell(), "-c"]
    assert len(rest) == 5  # the command is one word


def read_to_the_end(process: RemoteProcess, timeout: float = 10.0) -> tuple[bytes, bytes]:
    out, err = b"", b""
    deadline = time.monotonic() + timeout
    while not process.finished():
        assert time.monotonic() < deadline, (out, err)
        select.select(process.waitables(), [], [], 0.1)
        more_out, more_err = process.read()
        out, err = out + more_out, err + more_err
    return out, err


def test_transport_forwards_stdin_and_eof(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:{Path(PYTHON).parent}:{os.environ['PATH']}")
    connection = SrunConnection("node2", "4242", str(FAKE_BIN / "srun"))
    # The fake srun execs the command: $$ is srun's pid, field 6 of stat its session.
    command = 'cat; echo "EOF on $FAKE_SLURM_HOST"; cut -d" " -f6 /proc/$$/stat; echo $$'
    process = connection.start(command, b"program\n")
    assert process.send(b"h")
    process.close_stdin()
    out, err = read_to_the_end(process)
    assert err == b""
    data, eof, session, pid = out.split(b"\n")[:4]
    assert (data, eof) == (b"program", b"hEOF on node2")
    assert session == pid  # srun leads its own session: a terminal's Ctrl-C misses it
    assert process.exit_status() == 0 and connection.alive()
    connection.close()


def fake_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SrunConnection:
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    monkeypatch.setenv("FAKE_SLURM_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("PATH", f"{FAKE_BIN}:{Path(PYTHON).parent}:{os.environ['PATH']}")
    return SrunConnection("node1", "4242", str(FAKE_BIN / "srun"))


def test_closing_a_node_waits_for_its_steps_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller that exits right after closing leaves no srun behind, even one
    whose step takes a while to end after its EOF (node 0's probe, under load)."""
    connection = fake_step(tmp_path, monkeypatch)
    process = connection.start("cat >/dev/null; sleep 1; exit 3")
    connection.close()
    assert process.exit_status() == 3  # ended, by itself, before close returned
    process.close()


def test_a_step_that_outstays_the_wait_is_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the wait, srun gets SIGTERM (real srun then SIGKILLs its step)."""
    connection = fake_step(tmp_path, monkeypatch)
    process = connection.start("trap 'exit 7' TERM; cat >/dev/null; while :; do sleep 0.1; done")
    started = time.monotonic()
    end_processes([process], wait=0.5)  # what close does, with a shorter wait
    assert process.exit_status() == 7 and time.monotonic() - started < 2.5
    process.close()


@pytest.mark.cluster  # jobs end to end: the CLI, the fake srun, the agents
def test_exec_runs_one_step_per_node(fake_slurm: FakeSlurm) -> None:
    script = 'echo "on $FAKE_SLURM_HOST as $SLURMD_NODENAME"'
    result = fake_slurm.run("exec", "slurm", "--", "sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "[node1] on node1 as node1" in result.stdout
    assert "[node2] on node2 as node2" in result.stdout
    assert sorted(step_hosts(fake_slurm)) == ["node1", "node2"]
    for step in fake_slurm.steps():
        assert_step_argv(step["argv"], step["host"])
    assert fake_slurm.left_running(timeout=5.0) == []


@pytest.mark.cluster  # jobs end to end, one of them torn down
def test_exec_returns_the_failing_steps_exit_code(fake_slurm: FakeSlurm) -> None:
    script = '[ "$FAKE_SLURM_HOST" = node2 ] && exit 3; sleep 30'
    result = fake_slurm.run(
        "exec", "--fail-fast", "--grace", "1", "slurm", "--", "sh", "-c", script
    )
    assert result.returncode == 3, result.stderr
    assert "node2 exited with code 3" in result.stderr
    assert fake_slurm.left_running(timeout=5.0) == []  # node1's sleep was torn down


def test_exec_over_ssh_when_asked(fake_slurm: FakeSlurm) -> None:
    # --transport ssh keeps SSH: node1 does not resolve here, so it fails to
    # connect, and no step is started.
    result = fake_slurm.run(
        "exec", "--transport", "ssh", "--connect-timeout", "2", "slurm", "--", "true"
    )
    assert result.returncode == 2
    assert "nothing was started" in result.stderr and "node1" in result.stderr
    assert fake_slurm.steps() == []


def test_no_srun_on_path_starts_nothing(fake_slurm: FakeSlurm, tmp_path: Path) -> None:
    # PATH is ours to set: a machine with Slurm installed has a real srun in /usr/bin.
    (tmp_path / "empty").mkdir()
    fake_slurm.env["PATH"] = str(tmp_path / "empty")
    result = fake_slurm.run("exec", "slurm", "--", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("clusterlaunch: error: srun not found on PATH")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert fake_slurm.calls() == []


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"SLURM_JOB_ID": None}, "not inside a Slurm allocation (SLURM_JOB_ID unset, though"),
        ({"SLURM_JOB_ID": "abc"}, "SLURM_JOB_ID='abc': not a Slurm job id"),
        ({"SLURM_JOB_NODELIST": "node[1-2"}, "SLURM_JOB_NODELIST='node[1-2': cannot read"),
        ({"SLURM_JOB_NODELIST": "-n1"}, "SLURM_JOB_NODELIST='-n1': node '-n1' starts with '-'"),
    ],
)
@pytest.mark.parametrize("command", ["exec", "run"])
def test_a_bad_allocation_starts_no_step(
    fake_slurm: FakeSlurm, env: dict[str, str | None], said: str, command: str
) -> None:
    """Refused up front, in one line: not one srun per node, each failing (or, with no
    job id, each a new Slurm job of its own outside the allocation)."""
    for name, value in env.items():
        if value is None:
            del fake_slurm.env[name]
        else:
            fake_slurm.env[name] = value
    argv = ("--", "true") if command == "exec" else ("allreduce.py",)
    result = fake_slurm.run(command, "slurm", *argv)
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.startswith(f"clusterlaunch: error: {said}"), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert fake_slurm.steps() == []


def test_scontrol_reads_what_clustershell_cannot(fake_slurm: FakeSlurm) -> None:
    # Slurm pads n[01-2] to the width of its first number; ClusterShell refuses it.
    fake_slurm.env["SLURM_JOB_NODELIST"] = "n[01-2]"
    result = fake_slurm.run("exec", "--dry-run", "slurm", "--", "true")
    assert result.returncode == 0, result.stderr
    assert "# node 0 (n01)" in result.stdout and "# node 1 (n02)" in result.stdout
    assert fake_slurm.calls() == [{"scontrol": ["show", "hostnames", "n[01-2]"]}]


@pytest.mark.torch
@pytest.mark.cluster  # a torchrun job: seconds
def test_check_probes_every_node_through_srun(fake_slurm: FakeSlurm) -> None:
    result = fake_slurm.run("check", *LOCAL, "slurm", "allreduce.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "node1" in result.stdout and "node2" in result.stdout
    assert sorted(step_hosts(fake_slurm)) == ["node1", "node2"]


@pytest.mark.torch
@pytest.mark.cluster  # a torchrun job: seconds
def test_a_torchrun_variable_of_this_shell_fails_the_steps_preflight(
    fake_slurm: FakeSlurm,
) -> None:
    """srun --export=ALL gives every step this shell's environment, torchrun's variables too."""
    fake_slurm.env["TORCH_ELASTIC_WORKER_IDENTICAL"] = "1"
    result = fake_slurm.run("check", *LOCAL, "slurm", "allreduce.py")
    assert result.returncode == 2, result.stdout + result.stderr
    said = "TORCH_ELASTIC_WORKER_IDENTICAL is set in this shell's environment, which srun passes "
    assert result.stdout.count(said + "to the job steps (--export=ALL); it makes torchrun") == 2


@pytest.mark.torch
@pytest.mark.cluster  # a torchrun job: seconds
def test_allreduce_over_srun(fake_slurm: FakeSlurm) -> None:
    result = fake_slurm.run("run", *LOCAL, "slurm", "allreduce.py", "x y")
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(rank for rank, *_ in lines) == [0, 1, 2, 3]
    for rank, host, local, text in lines:
        assert host == ("node1" if rank < 2 else "node2")
        assert f"RANK={rank} LOCAL_RANK={local} " in text
        assert "WORLD_SIZE=4" in text and "SUM=10" in text and 'ARGV=["x y"]' in text
    # One step per node: the agent, which made the preflight's checks too (issue 17).
    steps = fake_slurm.steps()
    assert sorted(s["host"] for s in steps) == ["node1", "node2"]
    for step in steps:
        assert_step_argv(step["argv"], step["host"])
    agent = next(s["command"] for s in steps if s["host"] == "node2")
    assert "--node-rank 1" in agent and "--master-addr 127.0.0.1" in agent
    assert fake_slurm.left_running(timeout=5.0) == []


@pytest.mark.torch
@pytest.mark.cluster  # a torchrun job: seconds
@pytest.mark.parametrize(
    ("signum", "expected"), [(signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)]
)
def test_signals_to_the_controller_leave_nothing(
    fake_slurm: FakeSlurm, signum: int, expected: int
) -> None:
    process = fake_slurm.start("run", *LOCAL, "--grace", "2", "slurm", "sleeper.py")
    wait_for_lines(process, b" up", 4, timeout=90)
    started = time.monotonic()
    process.send_signal(signum)
    assert process.wait(timeout=30) == expected
    # SIGKILL: only the agents' stdin EOF (forwarded by srun) can clean up.
    assert fake_slurm.left_running(timeout=6.0) == []
    assert time.monotonic() - started < 8.0
