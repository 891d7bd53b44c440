"""What a host's ``setup:`` leaves running, against real sshd hosts: every command ends it,
none waits for it.

The setup runs in the shell that then becomes the remote program (the agent, the
probe of ``check``, ``jobctl`` of ``ps``/``kill``/``stacks``, ``doctor``'s). Before,
only an agent that ran a job ended what the setup left; ``ps``, ``kill`` and
``stacks`` also waited for it, as it held the session's stderr (``sleep 341 &``:
no answer until ``timeout 40`` killed them), and ``setup: exec true`` held the
session until ``--setup-timeout``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

# Each writes its PID: a plain background job, one in a session of its own, one that
# ignores SIGTERM, and a double-forked one (reparented away before any program of ours
# runs). All four keep the session's stderr, as a daemon that does not close it would.
LEFTOVERS = (
    "sleep 611 & echo $! >> {pids}\n"
    "setsid sleep 612 & echo $! >> {pids}\n"
    "(trap '' TERM HUP; exec sleep 613) & echo $! >> {pids}\n"
    "(sleep 614 & echo $! >> {pids})"
)
COMMANDS = {
    "check": [],
    "ps": [],
    "kill": ["no-such-job"],
    "stacks": ["no-such-job"],
    "doctor": [],
    "run": ["sleeper.py"],  # the preflight fails on the other host: nothing starts
}
ANSWER_S = 15.0  # a SIGTERM-proof leftover costs its 2 s; before, these hung for 10 min


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_waits_for_or_leaves_what_a_setup_started(
    sim_cluster, tmp_path: Path, assert_no_orphans, command: str
) -> None:
    pids = tmp_path / "pids"
    setup = {"setup": LEFTOVERS.format(pids=pids)}
    other = {"setup": "false"} if command == "run" else {}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, other)])
    began = time.monotonic()
    result = run_cli(command, sim_cluster, str(hosts), *COMMANDS[command], timeout=60)
    took = time.monotonic() - began
    assert result.returncode in (0, 1, 2), result.stderr  # 1: no such job; 2: run's preflight
    assert "could not ask" not in result.stderr and "Traceback" not in result.stderr
    started = [int(word) for word in pids.read_text().split()]
    assert len(started) == 4, started  # the setup ran once, all four started
    assert took < ANSWER_S, f"{command} took {took:.1f} s"
    # SIGTERM at once, SIGKILL 2 s later for the one that ignores it (check and doctor
    # answer before that: their programs end it after their answer).
    left = _wait_gone(started, timeout=5.0)
    assert left == [], f"{command} left the setup's {left} running"
    assert_no_orphans(sim_cluster, timeout=2.0)


@pytest.mark.parametrize("command", ["exec", "run"])
def test_a_setup_that_execs_is_answered_at_once_and_leaves_nothing(
    sim_cluster, tmp_path: Path, assert_no_orphans, command: str
) -> None:
    # `exec CMD` replaces the shell: no trap sees it. The watchdog held the session
    # (and lived on) until --setup-timeout, which was then reported as the cause.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": "exec true"})])
    args = ["--", "echo", "ran"] if command == "exec" else ["sleeper.py"]
    began = time.monotonic()
    result = run_cli(command, sim_cluster, "--setup-timeout", "20", str(hosts), *args, timeout=60)
    took = time.monotonic() - began
    assert result.returncode == (255 if command == "exec" else 2), result.stderr
    assert "setup: ended the shell (exit 0) before clusterlaunch's Python started" in (
        result.stderr
    )
    assert "did not finish" not in result.stderr and "still running" not in result.stderr
    assert took < 10, f"{command} took {took:.1f} s"
    assert_no_orphans(sim_cluster, timeout=1.0)  # the watchdog and its sleep too
