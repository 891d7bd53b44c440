"""The supervisor against scripted hosts: every exit status of docs/cli.md from an event sequence.

The hosts are :mod:`clusterlaunch.testing.fakes` connections whose agents send
the bytes a real agent sends; the supervisor, the output router and the
verdict are the real ones. The cluster tier runs the same endings over SSH.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core import defaults, render
from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.remote import program_payload
from clusterlaunch.testing.agentscript import (
    Exit,
    FakeAgent,
    Hang,
    Interrupt,
    Pause,
    Raw,
    Stderr,
    Suspend,
    Unresponsive,
    exits,
    job_output,
    rank_output,
    root_cause,
    started,
    stopping,
)
from clusterlaunch.testing.fakes import FakeClock, FakeConnection
from clusterlaunch.testing.setuphost import SetupHost
from clusterlaunch.transport.suspension import RESUME_GRACE_S, SuspendWatch
from tests.unit.plans import two_ranks_per_host

RUNNING = FakeAgent([started(), Hang()])  # runs until told to stop, then stops as agents do
CTRL_C = Interrupt(130, "interrupted (Ctrl-C)")


class ClosedPipe(io.BytesIO):
    """A console whose reader went away (``clusterlaunch run ... | head``)."""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError


class HungUp(ClosedPipe):
    """A terminal closed under a controller: writes fail with EIO, as Linux's tty does."""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise OSError(errno.EIO, "Input/output error")


@dataclass
class Run:
    """One supervised job: how it ended, the hosts, and what the console showed."""

    outcome: JobOutcome
    hosts: dict[str, FakeConnection]
    out: str
    err: str

    def sent(self, host: str) -> bytes:
        """The control bytes ``host``'s agent received, heartbeats left out."""
        return bytes(self.hosts[host].process.received).replace(b"h", b"")


def supervise(
    agents: Mapping[str, FakeAgent],
    *,
    exec_argv: tuple[str, ...] | None = None,
    clock: FakeClock | None = None,
    console_out: io.BytesIO | None = None,
    console_err: io.BytesIO | None = None,
    start_errors: Mapping[str, str] | None = None,
    setups: Mapping[str, str] | None = None,
    kills: Mapping[str, FakeAgent] | None = None,
    **options: object,
) -> Run:
    """``setups``: a ``setup:`` per host (a :class:`SetupHost`); ``kills``: what its kills play."""
    plan = two_ranks_per_host(list(agents), exec_argv, setups)
    hosts = {
        name: (
            SetupHost(name, agent, clock, (kills or {}).get(name))
            if name in (setups or {})
            else FakeConnection(name, agent, clock, (start_errors or {}).get(name))
        )
        for name, agent in agents.items()
    }
    ranks = (
        []
        if exec_argv
        else [(r, n.host, r - n.first_rank) for n in plan.nodes for r in n.global_ranks]
    )
    out, err = console_out or io.BytesIO(), console_err or io.BytesIO()
    router = OutputRouter(Prefixes(ranks, list(agents), False), Console(out, err))
    kwargs: dict[str, object] = {
        "fail_fast": exec_argv is None,
        "quiet_teardown": exec_argv is None,
    }
    kwargs.update(options)
    if clock is not None:
        kwargs["clock"] = clock
    outcome = Supervisor(plan, hosts, router, **kwargs).run()  # type: ignore[arg-type]
    text = lambda stream: stream.getvalue().decode() if not isinstance(stream, ClosedPipe) else ""  # noqa: E731
    return Run(outcome, hosts, text(out), text(err))


def test_every_host_ending_well_is_0() -> None:
    ok = FakeAgent([started(), rank_output(0, b"step 1\n"), *exits(0)])
    run = supervise({"a": ok, "b": FakeAgent([started(), *exits(0)])})
    assert run.outcome == JobOutcome(0, "all hosts finished")
    assert "[r0 a:0] step 1\n" in run.out
    command, stdin = run.hosts["a"].started[0]
    assert command == two_ranks_per_host().nodes[0].command and stdin == program_payload("agent")
    assert run.sent("a") == b"" and run.hosts["a"].process.closed  # nothing to tear down


@pytest.mark.parametrize(("exitcode", "status"), [(3, 3), (-9, 137), (-6, 134)])
def test_a_failed_rank_gives_its_own_code(exitcode: int, status: int) -> None:
    failing = FakeAgent(
        [started(), Pause(2), rank_output(3, b"CUDA out of memory\n", stderr=True),
         *exits(1, root_cause=root_cause(1, exitcode))]
    )  # fmt: skip
    run = supervise({"a": RUNNING, "b": failing})
    assert (run.outcome.exit_code, run.outcome.rank, run.outcome.host) == (status, 3, "b")
    assert run.outcome.tail == ["CUDA out of memory"]
    assert render.outcome_text(run.outcome).startswith(
        f"job failed: rank 3 on b exited with code {status}"
    )
    assert run.sent("a") == b"t"  # fail fast: the other host is torn down


def test_a_host_failing_without_a_root_cause_gives_its_code() -> None:
    run = supervise(
        {"a": RUNNING, "b": FakeAgent([started(), job_output(b"bad\n", True), *exits(2)])}
    )
    assert (run.outcome.exit_code, run.outcome.host) == (2, "b")
    assert run.outcome.reason == "b exited with code 2" and run.outcome.tail == ["bad"]


def test_the_job_not_starting_is_127_with_the_agents_message() -> None:
    cannot = FakeAgent(exits(127, "start-failed", message="cannot start torchrun: not found"))
    run = supervise({"a": cannot, "b": RUNNING})
    assert run.outcome == JobOutcome(127, "a failed")
    assert "clusterlaunch: a: cannot start torchrun: not found" in run.err


def test_timeout_is_124_and_tears_every_host_down() -> None:
    run = supervise({"a": RUNNING, "b": RUNNING}, clock=FakeClock(tick=0.1), timeout=2.0)
    assert run.outcome == JobOutcome(
        124, "--timeout 2 s reached (still running: a, b)", stopped=True
    )
    assert run.sent("a") == run.sent("b") == b"t"


@pytest.mark.parametrize(
    ("status", "reason"),
    [(129, "SIGHUP"), (130, "interrupted (Ctrl-C)"), (143, "terminated (SIGTERM)")],
)
def test_a_signal_to_the_controller_is_its_status(status: int, reason: str) -> None:
    run = supervise(
        {"a": FakeAgent([started(), Pause(2), Interrupt(status, reason), Hang()]), "b": RUNNING}
    )
    assert run.outcome == JobOutcome(status, reason, stopped=True)
    assert render.outcome_text(run.outcome) == f"job stopped: {reason}"
    assert run.sent("a") == run.sent("b") == b"t"


SCANCELLED = [stopping("signal 15"), Pause(1), *exits(-15, "signal 15")]


def test_a_signal_an_agent_got_stops_the_job_with_its_status() -> None:
    # Plain salloc + scancel: Slurm signals the steps only, never the controller.
    run = supervise({"a": RUNNING, "b": FakeAgent([started(), Pause(2), *SCANCELLED])})
    reason = "the agent on b got SIGTERM (scancel, a time limit, a shutdown?)"
    assert run.outcome == JobOutcome(143, reason, host="b", stopped=True)
    assert render.outcome_text(run.outcome) == f"job stopped: {reason}"
    assert run.sent("a") == b"t"


def test_the_controllers_own_signal_is_the_reason_over_a_hosts() -> None:
    # scancel of salloc -K or sbatch signals both; the hosts' may be read first.
    late = Interrupt(143, "terminated (SIGTERM)")
    agents = {
        "a": FakeAgent([started(), Pause(2), *SCANCELLED]),
        "b": FakeAgent([started(), Hang()], on={"t": [Pause(1), late, Pause(2), *SCANCELLED]}),
    }
    run = supervise(agents)
    assert run.outcome == JobOutcome(143, "terminated (SIGTERM)", stopped=True)
    assert run.sent("b") == b"t" and "second interrupt" not in run.err


def test_a_node_lost_while_the_others_stop_for_its_loss_is_the_cause() -> None:
    # A Slurm node fails: Slurm cancels the other steps (SIGTERM), and the failed
    # node's srun ends with 0 and no report, after teardown has begun.
    agents = {
        "a": FakeAgent([started(), Pause(2), *SCANCELLED]),
        "b": FakeAgent([started(), Hang()], on={"t": [Pause(2), Exit(0)]}),
    }
    run = supervise(agents)
    assert run.outcome == JobOutcome(255, "host b was lost", host="b")


def test_a_signal_while_starting_stops_before_any_output() -> None:
    run = supervise({"a": FakeAgent([CTRL_C, Hang()]), "b": RUNNING})
    assert run.outcome.exit_code == 130 and run.outcome.stopped


@pytest.mark.parametrize(
    "killed",
    [[stopping("killed"), Pause(2), *exits(-15, "killed")], [*exits(-15, "killed")]],
    ids=["announced", "only-in-the-exit-report"],
)
def test_clusterlaunch_kill_is_137(killed: list) -> None:
    run = supervise({"a": RUNNING, "b": FakeAgent([started(), Pause(1), *killed])})
    assert run.outcome == JobOutcome(137, "the job was killed (clusterlaunch kill)", stopped=True)


def test_a_closed_console_is_141() -> None:
    chatty = FakeAgent([started(), rank_output(0, b"hello\n"), Hang()])
    run = supervise({"a": chatty, "b": RUNNING}, console_out=ClosedPipe())
    assert run.outcome == JobOutcome(141, "stdout was closed (broken pipe)", stopped=True)
    assert run.sent("a") == run.sent("b") == b"t"


@pytest.mark.parametrize("status", [None, 255, 0])  # 0: srun, when its node failed
def test_a_channel_ending_without_a_report_is_a_lost_host(status: int | None) -> None:
    run = supervise({"a": RUNNING, "b": FakeAgent([started(), Pause(2), Exit(status)])})
    assert run.outcome == JobOutcome(255, "host b was lost", host="b")
    said = "no exit status" if status is None else f"exit {status}"
    assert f"b: connection ended without a report ({said})" in run.err


def test_a_host_failing_its_keepalives_is_lost() -> None:
    run = supervise({"a": RUNNING, "b": FakeAgent([started(), Unresponsive(), Hang()])})
    assert run.outcome == JobOutcome(255, "host b was lost", host="b")
    assert "b: host lost (no answer to keepalives)" in run.err


def test_a_lost_host_is_said_to_run_on_until_its_heartbeat_timeout() -> None:
    """Cut off, it never gets the teardown: its job runs on until its agent misses the
    controller for --heartbeat-timeout. Nothing said so (35 s after a Ctrl-C, it ran)."""
    run = supervise(
        {"a": RUNNING, "b": FakeAgent([started(), Unresponsive(), Hang()])}, heartbeat_timeout=120
    )
    job = two_ranks_per_host().job_id
    assert run.err.splitlines()[-1] == (
        "clusterlaunch: b: its part of the job may still be running there: its agent ends it "
        "after --heartbeat-timeout (120 s) without word from this controller; clusterlaunch "
        f"ps HOSTS lists it, clusterlaunch kill HOSTS {job} ends it once the host answers"
    )
    assert "a: its part" not in run.err  # it got the teardown and confirmed it


def test_a_host_that_lost_an_awake_controller_names_the_network() -> None:
    """A short partition under a small --heartbeat-timeout was blamed on a suspension of
    this controller, which was never suspended, and on every host."""
    gave_up = FakeAgent(
        [started(), Pause(2), stopping("controller-lost"), *exits(-15, "controller-lost")]
    )
    run = supervise({"a": RUNNING, "b": gave_up}, heartbeat_timeout=2)
    cut = "the network between here and b was cut"
    assert run.outcome == JobOutcome(255, f"b lost touch with the controller ({cut})", host="b")
    assert (
        "b: the host stopped the job: it heard nothing from this controller for "
        "--heartbeat-timeout (2 s), though the controller was not suspended and kept sending: "
        f"{cut} for that long"
    ) in run.err
    assert "suspended?" not in run.err


def test_hosts_that_lost_a_suspended_controller_stop_with_255() -> None:
    gave_up = FakeAgent(
        [started(), Suspend(30), stopping("controller-lost"), *exits(-15, "controller-lost")]
    )
    run = supervise({"a": gave_up, "b": RUNNING}, clock=FakeClock(tick=0.1))
    assert run.outcome == JobOutcome(255, "the hosts lost touch with the controller")
    assert (
        "a: the host stopped the job: it heard nothing from this controller for "
        "--heartbeat-timeout seconds (was clusterlaunch suspended?)"
    ) in run.err


def test_a_host_that_cannot_start_its_agent_is_255_and_nothing_else_runs_on() -> None:
    run = supervise({"a": RUNNING, "b": RUNNING}, start_errors={"b": "channel refused"})
    assert run.outcome == JobOutcome(255, "b could not start", host="b")
    assert "clusterlaunch: b: channel refused" in run.err
    assert run.hosts["b"].started == [] and run.sent("a") == b"t"


def test_an_unexpected_error_while_starting_is_raised_after_teardown() -> None:
    class Broken(FakeConnection):
        def start(self, command: str, stdin: bytes = b"") -> object:  # type: ignore[override]
            raise RuntimeError("bug")

    plan = two_ranks_per_host()
    hosts = {"a": FakeConnection("a", RUNNING), "b": Broken("b")}
    router = OutputRouter(Prefixes([], ["a", "b"], False), Console(io.BytesIO(), io.BytesIO()))
    clock = FakeClock(tick=1.0, now=0.0)
    with pytest.raises(RuntimeError, match="bug"):
        Supervisor(plan, hosts, router, clock=clock).run()  # type: ignore[arg-type]
    # What did start is closed at once (controller/readloop.start_all): its agent
    # reads end of file on stdin and tears its job down by itself.
    assert hosts["a"].process.closed
    # No agent was handed over, so the teardown waits for none: it used to wait out
    # its whole deadline (grace + 3 s, 8 readings of this clock), sleeping 0.1 s a turn.
    assert clock.now < 5


def test_exec_without_fail_fast_runs_every_host_to_its_end() -> None:
    agents = {
        "a": FakeAgent([started(), Pause(4), job_output(b"a failed\n", True), *exits(3)]),
        "b": FakeAgent([started(), Pause(1), *exits(0)]),
        "c": FakeAgent([started(), Pause(8), *exits(5)]),
    }
    run = supervise(agents, exec_argv=("make",))
    assert run.outcome.exit_code == 3 and run.outcome.host == "a"
    assert run.outcome.reason == "2 of 3 host(s) failed: a (3), c (5)"
    assert run.outcome.tail == ["a failed"]
    assert all(run.sent(h) == b"" for h in agents)  # nobody was stopped


def test_exec_without_fail_fast_counts_a_lost_host_as_255() -> None:
    agents = {
        "a": FakeAgent([started(), Unresponsive(), Hang()]),
        "b": FakeAgent([started(), Pause(3), *exits(0)]),
    }
    run = supervise(agents, exec_argv=("true",))
    assert run.outcome.exit_code == 255 and run.outcome.reason == "1 of 2 host(s) failed: a (255)"
    assert run.hosts["a"].process.closed


def test_exec_fail_fast_stops_the_others() -> None:
    agents = {"a": FakeAgent([started(), Pause(2), *exits(4)]), "b": RUNNING}
    run = supervise(agents, exec_argv=("true",), fail_fast=True)
    assert run.outcome == JobOutcome(4, "a exited with code 4", host="a", tail=[])
    assert run.sent("b") == b"t"


def test_a_second_stop_in_teardown_sends_k() -> None:
    stubborn = FakeAgent(
        [started(), Hang()],
        on={"t": [stopping("requested"), Pause(2), CTRL_C, Hang()], "k": exits(-9, "requested")},
    )
    failing = FakeAgent([started(), Pause(1), *exits(1)])
    run = supervise({"a": failing, "b": stubborn})
    assert run.sent("b") == b"tk"
    # The teardown was the failure's: this Ctrl-C is the first.
    said = "clusterlaunch: interrupted (Ctrl-C) during the teardown: killing everything now\n"
    assert said in run.err and "second interrupt" not in run.err
    assert run.outcome.exit_code == 1 and run.outcome.host == "a"  # the first cause decides


def test_more_interrupts_in_teardown_say_it_once() -> None:
    stubborn = FakeAgent(
        [started(), Pause(1), CTRL_C, Hang()],
        on={"t": [Pause(1), CTRL_C, CTRL_C, CTRL_C, Hang()], "k": exits(-9, "requested")},
    )
    run = supervise({"a": stubborn, "b": RUNNING})
    assert run.err.count("second interrupt: killing everything now") == 1
    assert run.sent("a") == b"tk"


def test_a_console_that_breaks_in_teardown_does_not_hurry_it() -> None:
    """A closed terminal after a Ctrl-C (SIGHUP, then EIO): no second interrupt, and the
    ranks' last words are still routed (the log files get them: test_broken_pipe.py)."""
    stubborn = FakeAgent(
        [started(), Pause(1), CTRL_C, Hang()],
        on={"t": [rank_output(0, b"cleaning\n"), Pause(2), rank_output(0, b"LAST\n"), *exits(0)]},
    )
    run = supervise({"a": stubborn, "b": RUNNING}, console_out=HungUp(), console_err=HungUp())
    assert run.sent("a") == b"t"  # no "k": the rank's handler ran to its end
    assert run.outcome == JobOutcome(130, "interrupted (Ctrl-C)", stopped=True)


HUP = Interrupt(129, "SIGHUP")
TERM = Interrupt(143, "terminated (SIGTERM)")


@pytest.mark.parametrize("again", [HUP, TERM], ids=["sighup", "sigterm"])
@pytest.mark.parametrize("first", [HUP, TERM, CTRL_C], ids=["sighup", "sigterm", "ctrl-c"])
def test_a_sighup_or_sigterm_in_teardown_does_not_hurry_it(
    first: Interrupt, again: Interrupt
) -> None:
    """A closing terminal sends SIGHUP twice; one stop request may send SIGTERM twice:
    the ranks' handlers still run to their end (only a Ctrl-C hurries, core/interrupts.py)."""
    saving = FakeAgent(
        [started(), Pause(1), first, Hang()],
        on={
            "t": [Pause(1), again, Pause(1), rank_output(0, b"saved\n"), *exits(0)],
            "k": exits(-9, "requested"),
        },
    )
    run = supervise({"a": saving, "b": RUNNING})
    assert run.sent("a") == b"t" and "killing everything now" not in run.err
    assert "[r0 a:0] saved\n" in run.out
    assert run.outcome == JobOutcome(first.exit_code, first.reason, stopped=True)


def test_a_sighup_after_the_terminal_failed_does_not_hurry_the_teardown() -> None:
    """EIO first (the console is lost: a graceful teardown), then the terminal's SIGHUP."""
    saving = FakeAgent(
        [started(), rank_output(0, b"hello\n"), Hang()],
        on={"t": [Pause(1), HUP, Pause(1), rank_output(0, b"saved\n"), *exits(0)]},
    )
    run = supervise({"a": saving, "b": RUNNING}, console_out=HungUp(), console_err=HungUp())
    assert run.sent("a") == b"t"
    reason = "stdout's terminal was closed (input/output error)"
    assert run.outcome == JobOutcome(129, reason, stopped=True)


def test_a_sighup_in_a_failures_teardown_does_not_hurry_it() -> None:
    saving = FakeAgent([started(), Hang()], on={"t": [Pause(1), HUP, Pause(1), *exits(0)]})
    run = supervise({"a": FakeAgent([started(), Pause(1), *exits(1)]), "b": saving})
    assert run.sent("b") == b"t" and "killing everything now" not in run.err
    assert run.outcome.exit_code == 1 and run.outcome.host == "a"


def test_a_ctrl_c_after_a_sighup_hurries_the_teardown() -> None:
    stubborn = FakeAgent(
        [started(), Pause(1), HUP, Hang()],
        on={"t": [Pause(1), CTRL_C, Hang()], "k": exits(-9, "requested")},
    )
    run = supervise({"a": stubborn, "b": RUNNING})
    assert run.sent("a") == b"tk"
    assert "clusterlaunch: second interrupt: killing everything now\n" in run.err
    assert run.outcome == JobOutcome(129, "SIGHUP", stopped=True)


def test_a_terminal_closed_without_sighup_is_129() -> None:
    chatty = FakeAgent([started(), rank_output(0, b"hello\n"), Hang()])
    run = supervise({"a": chatty, "b": RUNNING}, console_out=HungUp(), console_err=HungUp())
    reason = "stdout's terminal was closed (input/output error)"
    assert run.outcome == JobOutcome(129, reason, stopped=True)
    assert run.sent("a") == run.sent("b") == b"t"


def test_a_host_that_never_confirms_is_given_up_after_the_grace() -> None:
    deaf = FakeAgent([started(), Hang()], on={"t": [Hang()]})
    run = supervise(
        {"a": FakeAgent([started(), *exits(1)]), "b": deaf}, clock=FakeClock(tick=0.05), grace=0.5
    )
    assert "clusterlaunch: b: no confirmation that the job ended" in run.err
    assert run.hosts["b"].process.closed


SHUTDOWN = job_output(b"Traceback (most recent call last):\nSignalException: 15\n", stderr=True)


@pytest.mark.parametrize("quiet", [True, False])
def test_quiet_teardown_keeps_torchruns_shutdown_off_the_console(quiet: bool) -> None:
    noisy = FakeAgent(
        [started(), Hang()], on={"t": [stopping("requested"), SHUTDOWN, *exits(-15, "requested")]}
    )
    run = supervise({"a": FakeAgent([started(), *exits(1)]), "b": noisy}, quiet_teardown=quiet)
    assert ("SignalException" in run.err) is not quiet
    hid = "hid 2 line(s) of torchrun shutdown output (use --log-dir to keep them)"
    assert (hid in run.err) is quiet


def test_a_suspended_controller_gives_the_keepalives_time_to_catch_up() -> None:
    clock = FakeClock(tick=0.1)
    suspended = FakeAgent([started(), Pause(3), Suspend(30), Unresponsive(), Hang()])
    run = supervise({"a": suspended, "b": RUNNING}, clock=clock)
    assert run.outcome == JobOutcome(255, "host a was lost", host="a")
    checks = run.hosts["a"].alive_checks
    before, after = [t for t in checks if t < 1030], [t for t in checks if t >= 1030]
    assert before and after  # judged before the suspension, and again after it
    assert min(after) - max(before) >= 30 + RESUME_GRACE_S  # not within the grace


def test_a_suspension_in_the_preflight_still_counts_once_the_job_runs() -> None:
    """A Ctrl-Z across the end of the setups: the command's one watch saw it in the
    preflight, and the supervisor, started just after, does not judge the hosts' silence
    (keepalives not caught up yet) as lost. A watch of its own saw no stop at all."""
    clock = FakeClock(tick=0.1)
    watch = SuspendWatch(clock)
    clock.advance(12)  # stopped in the preflight, whose loop looked right after the resume
    watch()
    behind = FakeAgent([started(), Unresponsive(), Pause(3), *exits(0)])
    run = supervise({"a": behind, "b": FakeAgent([started(), *exits(0)])}, clock=clock, awake=watch)
    assert run.outcome == JobOutcome(0, "all hosts finished")
    assert run.hosts["a"].alive_checks == []


def test_heartbeats_reach_every_running_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(defaults, "HEARTBEAT_INTERVAL_S", 0.01)
    listening = FakeAgent([started(), Hang()], on={"h": exits(0)})
    run = supervise({"a": listening, "b": listening})
    assert run.outcome.exit_code == 0
    assert run.hosts["a"].process.heartbeats >= 1 and run.hosts["b"].process.heartbeats >= 1


def test_what_a_host_says_outside_the_frames_is_shown_as_its_output() -> None:
    agents = {
        "a": FakeAgent(
            [Raw(b"Welcome to a\n"), started(), Stderr(b"Warning: added key\n"), *exits(0)]
        ),
        "b": FakeAgent(
            [started(), Raw(b"garbage that is no frame header at all\n"), Pause(2), Exit(0)]
        ),
    }
    run = supervise(agents, exec_argv=("true",))
    assert "[a] Welcome to a\n" in run.out and "[a] Warning: added key\n" in run.err
    assert "clusterlaunch: b: garbled agent output (bad frame header" in run.err


STUCK_SETUP = {"b": "sleep 599"}
SETUP_PID = Raw(b"@@setup@@ pid=777 start=4321 limit=300\n")


@pytest.mark.parametrize("pid_arrives", ["before the interrupt", "during the teardown"])
def test_an_interrupt_kills_a_setup_once_whenever_its_pid_arrives(pid_arrives: str) -> None:
    # Seen in CI: a Ctrl-C while a setup's PID line was still on its way over SSH; the
    # teardown asked for kills once, before the line arrived, and the setup ran on.
    early = pid_arrives == "before the interrupt"
    stuck = FakeAgent(
        [SETUP_PID, Hang()] if early else [Hang()],  # its shell ignores "t" (stdin /dev/null)
        on={"t": [Hang()] if early else [Pause(2), SETUP_PID, Hang()]},
    )
    a = FakeAgent([started(), Pause(3), CTRL_C, Hang()])
    run = supervise({"a": a, "b": stuck}, setups=STUCK_SETUP, clock=FakeClock(tick=0.05))
    assert run.outcome == JobOutcome(130, "interrupted (Ctrl-C)", stopped=True)
    host = run.hosts["b"]
    assert isinstance(host, SetupHost) and len(host.kills) == 1
    assert "-777" in host.kills[0] and "= 4321 ]" in host.kills[0]
    assert "b: no confirmation that the job ended" in run.err  # it never answered; killed


def test_a_setup_that_never_reports_a_pid_is_not_killed() -> None:
    stuck = FakeAgent([Hang()], on={"t": [Hang()]})
    a = FakeAgent([started(), Pause(3), CTRL_C, Hang()])
    run = supervise({"a": a, "b": stuck}, setups=STUCK_SETUP, clock=FakeClock(tick=0.05))
    host = run.hosts["b"]
    assert isinstance(host, SetupHost) and host.kills == []  # no PID: nothing safe to signal


def test_a_second_interrupt_while_a_setup_is_killed_hurries_the_teardown() -> None:
    stuck = FakeAgent([SETUP_PID, Hang()], on={"t": [Hang()]})
    a = FakeAgent([started(), Pause(3), CTRL_C, Hang()])
    run = supervise(
        {"a": a, "b": stuck},
        setups=STUCK_SETUP,
        kills={"b": FakeAgent([CTRL_C, Exit(0)])},  # a second Ctrl-C while the kill is awaited
        clock=FakeClock(tick=0.05),
    )
    assert run.outcome == JobOutcome(130, "interrupted (Ctrl-C)", stopped=True)
    assert "second interrupt: killing everything now" in run.err
    assert run.sent("b") == b"tk"  # still in its setup: "k" for when it ends
