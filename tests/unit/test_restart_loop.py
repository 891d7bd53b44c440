"""The attempt loop (controller/restarts.py) with the launch itself faked: how often, how long."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from clusterlaunch.controller import restarts as loop
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.launcher import JobRequest
from clusterlaunch.controller.restartparts import Ended
from clusterlaunch.core.errors import JobOutcome, StopJob, UsageError
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.restarts import RestartPolicy
from clusterlaunch.transport import SshSettings

FAILED = JobOutcome(7, "rank 1 on b exited with code 7")
LOST = JobOutcome(255, "host b was lost")


def request(max_restarts: int, timeout: float | None = None) -> JobRequest:
    hosts = (HostSpec("a", 1), HostSpec("b", 1))
    return JobRequest(
        inventory=Inventory("h.yaml", hosts),
        targets=(SshTarget("a", "a"), SshTarget("b", "b")),
        options=LaunchOptions(script="t.py"),
        job_id="j1",
        ssh=SshSettings(),
        timeout=timeout,
        restarts=RestartPolicy(max_restarts=max_restarts, backoff=2.0, min_hosts=2),
        restart_count=0,
    )


class Fake:
    """Scripted attempt outcomes; records the back-off waits and each restart's number."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, outcomes: list[Any]) -> None:
        self.outcomes = list(outcomes)
        self.waits: list[float] = []
        self.restarts: list[int] = []
        self.err = io.BytesIO()
        monkeypatch.setattr(loop.launcher, "launch_in", lambda *a: self._next())
        monkeypatch.setattr(loop, "_restart", self._restart)
        monkeypatch.setattr(loop, "sleep_in_slices", self._sleep)  # the back-off
        self.on_sleep: Callable[[], None] = lambda: None

    def _next(self) -> JobOutcome:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _restart(self, base: JobRequest, restart: int, *rest: Any) -> JobOutcome:
        self.restarts.append(restart)
        return self._next()

    def _sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.on_sleep()

    def run(self, req: JobRequest) -> JobOutcome:
        console = Console(io.BytesIO(), self.err)
        return loop._attempts(req, None, console, None)  # type: ignore[arg-type]

    @property
    def said(self) -> str:
        return self.err.getvalue().decode()


def test_a_rank_failing_every_time_gets_n_plus_1_attempts_and_its_code(monkeypatch) -> None:
    fake = Fake(monkeypatch, [FAILED, FAILED, FAILED])
    assert fake.run(request(max_restarts=2)) == FAILED
    assert fake.restarts == [1, 2]
    assert fake.waits == [2.0, 4.0]
    assert "restart 1 of 2 in 2 s" in fake.said and "restart 2 of 2 in 4 s" in fake.said


def test_success_after_a_lost_host_is_the_last_attempts_status(monkeypatch) -> None:
    fake = Fake(monkeypatch, [LOST, JobOutcome(0, "all hosts finished")])
    assert fake.run(request(max_restarts=3)).exit_code == 0
    assert fake.restarts == [1]
    assert "attempt 1 failed (host b was lost); restart 1 of 3 in 2 s" in fake.said
    assert "job succeeded in attempt 2 (after 1 restart(s))" in fake.said


@pytest.mark.parametrize("code", [130, 137, 143, 124])
def test_a_stop_is_never_restarted(monkeypatch, code: int) -> None:
    stopped = JobOutcome(code, "stopped", stopped=True)
    fake = Fake(monkeypatch, [stopped])
    assert fake.run(request(max_restarts=3)) is stopped
    assert fake.restarts == [] and fake.waits == []


def test_ctrl_c_in_the_backoff_ends_the_loop(monkeypatch) -> None:
    fake = Fake(monkeypatch, [FAILED])

    def interrupt() -> None:
        raise StopJob(130, "interrupted (Ctrl-C)")

    fake.on_sleep = interrupt
    with pytest.raises(StopJob):
        fake.run(request(max_restarts=3))
    assert fake.restarts == []


def test_timeout_spent_in_the_backoff_stops_with_124(monkeypatch) -> None:
    fake = Fake(monkeypatch, [FAILED])
    clock = iter([100.0, 149.5, 200.0])  # the deadline's start, before the wait, after it
    monkeypatch.setattr(loop.time, "monotonic", lambda: next(clock))
    outcome = fake.run(request(max_restarts=3, timeout=50))
    assert (outcome.exit_code, outcome.stopped) == (124, True)
    assert "job stopped: --timeout 50 s reached before restart 1" in fake.said
    assert fake.restarts == []
    assert fake.waits == [0.5]  # the back-off (2 s) cut to what --timeout left: it ended late


def test_an_attempt_that_cannot_start_ends_the_job(monkeypatch) -> None:
    """Too few hosts at a restart: the job ends (255), not counted and restarted again."""
    too_few = JobOutcome(255, "restart 1: only 1 usable host(s), --min-hosts is 2")

    def cannot_start(base: JobRequest, restart: int, *rest: Any) -> JobOutcome:
        fake.restarts.append(restart)
        raise Ended(too_few)

    fake = Fake(monkeypatch, [FAILED])
    monkeypatch.setattr(loop, "_restart", cannot_start)
    assert fake.run(request(max_restarts=3)) is too_few
    assert fake.restarts == [1]


def test_bad_input_found_at_a_restart_fails_the_job_with_the_last_status(monkeypatch) -> None:
    """A --sync scan refusing a file made during the back-off: it was exit 2 ('nothing
    started') as `clusterlaunch: error: ...`, after attempt 1 had run."""

    def refused(base: JobRequest, restart: int, *rest: Any) -> JobOutcome:
        raise UsageError("b'/p/bad-\\xff': name (or link target) is not UTF-8")

    fake = Fake(monkeypatch, [FAILED])
    monkeypatch.setattr(loop, "_restart", refused)
    outcome = fake.run(request(max_restarts=3))
    assert outcome.exit_code == 7 and not outcome.stopped
    assert outcome.reason.startswith("restart 1: b'/p/bad-")
    assert "clusterlaunch: job failed: restart 1: b'/p/bad-" in fake.said


def test_a_lost_connection_during_setup_is_said_so_never_as_exit_none() -> None:
    from clusterlaunch.core.reports import setup_failure

    assert setup_failure(None, "") == "the connection was lost during setup: no output"
    assert setup_failure(3, "boom") == "setup failed (exit 3): boom"
