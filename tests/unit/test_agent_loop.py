"""The agent's loop (``remote/agent.py``'s ``Agent``), run against pipes with real short jobs.

Each agent runs in a child forked from the test, so what it does to its own
process (signal handlers, child subreaper, killing every process below it)
stays there; its stdin and stdout are pipes this test plays the controller
on. No SSH, no bundle: the module as the unit tests import it. The bundled
program over real pipes is ``test_agent_drain.py``; over SSH, the cluster tier.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.core.frames import EVENT, FrameDecoder
from clusterlaunch.remote import claims, proctree, records, teardown
from clusterlaunch.remote.agent import Agent, main

ROOT_CAUSE = (
    "Root Cause (first observed failure):\n[0]:\n  time      : 2024-01-01_00:00:00\n"
    "  host      : node0\n  rank      : 5 (local_rank: 1)\n"
    "  exitcode  : -9 (pid: 4242)\n  error_file: <N/A>\n" + "=" * 60 + "\n"
)


class ForkedAgent:
    """The agent (``main``, so ``Agent.run``) in a forked child, stdin and stdout on pipes here."""

    def __init__(self, command: list[str], *options: str) -> None:
        self.job_id = f"unit-loop-{uuid.uuid4().hex[:8]}"  # every agent claims its id here
        argv = ["--job-id", self.job_id, "--node-rank", "0", "--heartbeat-timeout", "60"]
        argv += ["--grace", "5"]
        argv += options
        argv += ["--", *command]
        stdin_r, self.stdin_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the agent: never returns into pytest
            code = 70  # only if main() raised: it ends the process itself
            try:
                os.dup2(stdin_r, 0)
                os.dup2(out_w, 1)
                for fd in (stdin_r, out_w, self.stdin_w, self.out_r):
                    os.close(fd)
                main(argv)  # the agent's entry point: runs the loop, then os._exit
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(stdin_r)
        os.close(out_w)
        self.decoder = FrameDecoder()
        self.events: list[dict[str, Any]] = []
        self.output: dict[bytes, bytes] = {}
        self.status: int | None = None

    def send(self, data: bytes) -> None:
        os.write(self.stdin_w, data)

    def close_stdin(self) -> None:
        os.close(self.stdin_w)
        self.stdin_w = -1

    def read_until(self, name: str, timeout: float = 20) -> dict[str, Any]:
        """Read frames until the event ``name`` (the agent keeps running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for seen in self.events:
                if seen["event"] == name:
                    return seen
            if not self._read_some():
                break
        raise AssertionError(f"no {name!r} event; got {self.events}")

    def finish(self, timeout: float = 20) -> int:
        """Read to EOF and reap the agent; its exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._read_some():
            pass
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.01)
        else:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            raise AssertionError(f"the agent did not end; events: {self.events}")
        os.close(self.out_r)
        if self.stdin_w >= 0:
            os.close(self.stdin_w)
        assert self.decoder.leftover() == b""
        return self.status

    def read_output(self, tag: bytes, needle: bytes, timeout: float = 20) -> None:
        """Read frames until the job's ``tag`` output holds ``needle`` (the job is set up)."""
        deadline = time.monotonic() + timeout
        while needle not in self.output.get(tag, b""):
            if time.monotonic() > deadline or not self._read_some():
                raise AssertionError(f"no {needle!r} in {tag!r} output: {self.output}")

    def names(self) -> list[str]:
        return [event["event"] for event in self.events]

    def _read_some(self) -> bool:
        data = os.read(self.out_r, 1 << 16)
        for frame in self.decoder.feed(data):
            if frame.tag == EVENT:
                self.events.append(frame.event())
            else:
                self.output[frame.tag] = self.output.get(frame.tag, b"") + frame.data
        return bool(data)


def test_a_job_that_ends_by_itself_reports_its_output_then_its_code() -> None:
    agent = ForkedAgent(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert agent.finish() == 3
    assert agent.output == {b"O": b"out\n", b"E": b"err\n"}
    assert agent.names() == ["started", "exit"]
    started, ended = agent.events
    assert started["agent_pid"] == agent.pid and started["pid"] != agent.pid
    assert (ended["reason"], ended["code"], ended["root_cause"]) == ("exited", 3, None)


def test_a_daemon_the_job_detached_ends_with_it_found_by_the_tree_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The agent is child subreaper, so the detached sleep is reparented to it; the
    # marker sweep is not needed to find it (made to fail here, in the forked agent).
    def no_sweep(marker: str) -> list[int]:
        raise AssertionError("the marker sweep ran below a subreaper")

    monkeypatch.setattr(teardown, "marked_processes", no_sweep)
    agent = ForkedAgent(["sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"])
    assert agent.finish() == 0
    daemon = int(agent.output[b"O"])
    assert agent.events[0]["subreaper"] is True
    assert agent.events[-1]["reason"] == "exited"
    stat = proctree.read_stat(daemon)  # gone: killed, and reaped by the agent (no zombie)
    if stat is not None:
        os.kill(daemon, signal.SIGKILL)
        raise AssertionError(f"the detached sleep {daemon} outlived its job: {stat}")


def test_the_end_of_a_job_whose_pipes_ended_early_wakes_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the job's pipes closed, only its exit (SIGCHLD, through the wakeup fd) can
    wake the loop: its idle wait is stretched to 10 s here, and the agent must not sit it out."""
    stretched = Agent.wait
    monkeypatch.setattr(Agent, "wait", lambda self, timeout: stretched(self, timeout * 200))
    began = time.monotonic()
    agent = ForkedAgent(["sh", "-c", "exec >&- 2>&-; sleep 0.1; exit 4"])
    assert agent.finish(timeout=30) == 4
    assert time.monotonic() - began < 5, "the agent slept through its job's end"


IGNORES_TERM = ["sh", "-c", "trap '' TERM; echo ready; exec sleep 30"]  # only SIGKILL ends it


@pytest.mark.parametrize(
    ("control", "job", "status"), [(b"t", ["sleep", "30"], 143), (b"k", IGNORES_TERM, 137)]
)
def test_control_bytes_tear_the_job_down(control: bytes, job: list[str], status: int) -> None:
    agent = ForkedAgent(job, "--grace", "60")
    agent.read_until("started")
    if job is IGNORES_TERM:
        agent.read_output(b"O", b"ready")  # the trap is set before the teardown begins
    agent.send(b"h" + control)  # a heartbeat, then t (SIGTERM) or k (SIGKILL at once)
    assert agent.finish() == status
    assert agent.names() == ["started", "stopping", "exit"]
    assert agent.events[1]["reason"] == agent.events[2]["reason"] == "requested"
    assert (agent.events[2]["code"], agent.events[2]["escalated"]) == (128 - status, status == 137)


def test_stdin_eof_means_the_controller_is_gone() -> None:
    agent = ForkedAgent(["sleep", "30"])
    agent.read_until("started")
    agent.close_stdin()
    assert agent.finish() == 143
    assert [e.get("reason") for e in agent.events[1:]] == ["eof", "eof"]


def test_heartbeat_silence_tears_the_job_down() -> None:
    agent = ForkedAgent(["sleep", "30"], "--heartbeat-timeout", "0.3")
    began = time.monotonic()
    assert agent.finish() == 143
    assert time.monotonic() - began >= 0.3
    assert agent.events[1] == {"event": "stopping", "reason": "controller-lost"}


def test_sigusr1_is_recorded_then_acted_on_as_clusterlaunch_kill() -> None:
    # The job itself signals the agent (its parent) while the loop runs.
    agent = ForkedAgent(["sh", "-c", "kill -USR1 $PPID; exec sleep 30"])
    assert agent.finish() == 143
    assert agent.names() == ["started", "stopping", "exit"]
    assert agent.events[1]["reason"] == agent.events[2]["reason"] == "killed"


def test_a_second_signal_skips_the_grace() -> None:
    # A job that outlives SIGTERM: only the escalation ends it.
    stubborn = "trap '' TERM; echo ready; while :; do sleep 0.05; done"
    agent = ForkedAgent(["sh", "-c", stubborn], "--grace", "60")
    agent.read_output(b"O", b"ready")  # the trap is set before the first signal
    os.kill(agent.pid, signal.SIGTERM)
    assert agent.read_until("stopping")["reason"] == f"signal {signal.SIGTERM:d}"
    os.kill(agent.pid, signal.SIGINT)  # well before the 60 s grace
    assert agent.finish() == 137
    assert agent.events[-1]["escalated"] is True and agent.events[-1]["code"] == -9


def test_a_job_that_cannot_start_is_127(tmp_path: Path) -> None:
    agent = ForkedAgent([str(tmp_path / "no-such-program")])
    assert agent.finish() == 127
    assert agent.names() == ["exit"]
    assert agent.events[0]["reason"] == "start-failed" and agent.events[0]["code"] == 127
    assert agent.events[0]["message"].startswith(f"cannot start {tmp_path}/no-such-program: ")


def test_a_tail_dir_that_cannot_be_made_is_a_start_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def full(claim: claims.Claim) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(claims.Claim, "make_tail_dir", full)  # in the forked agent
    agent = ForkedAgent(["true"], "--rank-files")
    assert agent.finish() == 127
    said = agent.events[0]["message"]
    assert said.startswith("cannot create ") and f"/{agent.job_id}@" in said
    assert "(No space left on device)" in said


def test_rank_files_are_framed_with_their_global_rank(tmp_path: Path) -> None:
    # torchrun's --log-dir (the plan's AUTO) becomes the folder of the agent's claim.
    write = (
        'echo "$2" > "$0"; mkdir -p "$2/run_0/attempt_0/0" "$2/run_0/attempt_0/1"; '
        'printf r4 > "$2/run_0/attempt_0/0/stdout.log"; '
        'printf e5 > "$2/run_0/attempt_0/1/stderr.log"'
    )
    told = tmp_path / "log-dir"
    agent = ForkedAgent(
        ["sh", "-c", write, str(told), "--log-dir", "AUTO"], "--rank-files", "--first-rank", "4"
    )
    assert agent.finish() == 0
    assert agent.output == {b"o4": b"r4", b"e5": b"e5"}
    tail = Path(told.read_text().strip())
    assert tail.name.startswith(f"{agent.job_id}@")
    assert tail.parent == Path(records.private_state_dir() or "")  # no other user's to plant
    assert not tail.exists()  # read to the end, then removed with the claim
    assert claims.holder_of(agent.job_id, 0) is None


def test_a_printed_root_cause_ends_torchrun_at_once(tmp_path: Path) -> None:
    # torchrun prints the block, then spends a second shutting down: the agent ends it.
    job = f"printf '%s' '{ROOT_CAUSE}' >&2; exec sleep 30"
    agent = ForkedAgent(["sh", "-c", job], "--rank-files", "--first-rank", "4")
    began = time.monotonic()
    assert agent.finish() == 1
    assert time.monotonic() - began < 20  # not the sleep's 30 s
    ended = agent.events[-1]
    assert (ended["reason"], ended["code"]) == ("exited", 1)
    assert (ended["root_cause"]["local_rank"], ended["root_cause"]["exitcode"]) == (1, -9)


def test_a_job_without_workers_is_not_given_the_grace(tmp_path: Path) -> None:
    # torchrun in its exit barrier ignores SIGTERM; with no workers left it is killed at once.
    agent = ForkedAgent(
        ["sh", "-c", "trap '' TERM; echo ready; exec sleep 30"],
        "--rank-files",
        "--grace",
        "60",
    )
    agent.read_output(b"O", b"ready")  # the trap is set: SIGTERM is ignored from now on
    agent.send(b"t")
    assert agent.finish() == 137
    assert agent.events[-1]["reason"] == "requested"


COUNTS_SIGTERMS = r"""
import os, signal, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])
role = "child" if os.fork() == 0 else "leader"  # the child stays in the leader's group
os.write(1, b"%s ready\n" % role.encode())  # one write: the two share the pipe
count, first = 0, None
while first is None or time.monotonic() - first < 1:
    if signal.sigtimedwait([signal.SIGTERM], 0.05) is not None:
        count, first = count + 1, first or time.monotonic()
os.write(1, b"%s got %d\n" % (role.encode(), count))
"""


def test_teardown_sends_a_group_and_its_leader_one_sigterm() -> None:
    # A group leader was sent killpg and then kill: the same process twice, and a
    # handler still cleaning up ran again (a member of the group got the one).
    agent = ForkedAgent([sys.executable, "-c", COUNTS_SIGTERMS])
    agent.read_output(b"O", b"child ready")
    agent.read_output(b"O", b"leader ready")
    agent.send(b"t")
    assert agent.finish() == 0
    assert sorted(agent.output[b"O"].decode().splitlines()[2:]) == ["child got 1", "leader got 1"]
