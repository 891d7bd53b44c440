"""Ending setups given up on: each killed once, and a PID line on its way still read first.

The preflight's and doctor's programs (``end_setups``) and ``ps``/``kill``/``stacks``'
jobctl in a :class:`Batch` (``wait_guarded``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from clusterlaunch.controller.batch import Batch
from clusterlaunch.controller.setups import REPORT_WAIT_S, end_setups, kill_setups, wait_guarded
from clusterlaunch.core.errors import StopJob
from clusterlaunch.core.setupguard import SetupWatch
from clusterlaunch.testing.agentscript import Exit, FakeAgent, Hang, Interrupt, Pause, Raw, Step
from clusterlaunch.testing.setuphost import SetupHost

PID_LINE = b"@@setup@@ pid=%d start=4321 limit=300\n"


@dataclass
class Probe:
    """A host's program behind its setup, as the preflight's ``ProbeRun`` is."""

    host: str
    ended: bool = False
    connection: SetupHost = field(init=False)
    setup: SetupWatch = field(init=False)

    def __post_init__(self) -> None:
        self.connection = SetupHost(self.host, agents=0)  # its program never starts here
        self.setup = SetupWatch(self.host, expected=True)

    def done(self) -> bool:
        return self.ended


class Reads:
    """A read loop that delivers ``arrivals`` (host: stdout), then maybe a second Ctrl-C."""

    def __init__(self, arrivals: dict[str, bytes], interrupt: bool = False) -> None:
        self.arrivals = arrivals
        self.interrupt = interrupt
        self.deadlines: list[float] = []

    def __call__(
        self,
        runs: list[Probe],
        ready: Callable[[Probe], bool],
        deadline: float,
        say: Callable[[str], None],
    ) -> None:
        assert [run.host for run in runs if not ready(run)], "asked to read for nothing"
        for run in runs:
            run.setup.feed(self.arrivals.get(run.host, b""))
        self.deadlines.append(deadline)
        if self.interrupt:
            raise StopJob(130, "interrupted (Ctrl-C)")


def test_a_pid_line_on_its_way_is_read_and_its_setup_killed() -> None:
    known, late, silent = Probe("known"), Probe("late"), Probe("silent")
    known.setup.feed(PID_LINE % 11)
    pump = Reads({"late": PID_LINE % 22})
    end_setups([known, late, silent], pump)
    assert len(pump.deadlines) == 1
    assert [len(p.connection.kills) for p in (known, late, silent)] == [1, 1, 0]
    assert "-22" in late.connection.kills[0] and "= 4321 ]" in late.connection.kills[0]


def test_nothing_is_read_when_every_setup_has_reported_or_ended() -> None:
    known, ended, finished = Probe("known"), Probe("ended", ended=True), Probe("finished")
    known.setup.feed(PID_LINE % 11)
    finished.setup.feed(PID_LINE % 33 + b"@@setup@@ done\n")
    pump = Reads({})
    end_setups([known, ended, finished], pump)
    assert pump.deadlines == []
    assert [len(p.connection.kills) for p in (known, ended, finished)] == [1, 0, 0]


def test_a_second_interrupt_while_reading_still_kills_what_is_known() -> None:
    known, late = Probe("known"), Probe("late")
    known.setup.feed(PID_LINE % 11)
    end_setups([known, late], Reads({"late": PID_LINE % 22}, interrupt=True))
    assert len(known.connection.kills) == len(late.connection.kills) == 1


def test_the_wait_for_pid_lines_is_bounded() -> None:
    pump = Reads({})
    end_setups([Probe("silent")], pump)
    (deadline,) = pump.deadlines
    assert deadline - time.monotonic() <= REPORT_WAIT_S


def test_each_setup_is_killed_once_however_often_asked() -> None:
    probe = Probe("a")
    probe.setup.feed(PID_LINE % 11)
    for _ in range(3):
        kill_setups([(probe.connection, probe.setup)])
    assert len(probe.connection.kills) == 1 and probe.setup.killed


# -- wait_guarded: ps, kill and stacks wait on a Batch of jobctl behind setups ----------------


def _jobctl(*steps: Step) -> FakeAgent:
    """jobctl behind a setup: its program comes on stdin, so EOF there is where it starts."""
    return FakeAgent(on={"eof": list(steps)})


def _batch(hosts: dict[str, SetupHost]) -> Batch[str]:
    return Batch({name: (host, "jobctl list") for name, host in hosts.items()})


def test_a_ctrl_c_before_the_pid_line_still_kills_that_setup() -> None:
    # The line was on its way when the interrupt came: Batch.wait closed the
    # channel first, and the setup ran on until its own --setup-timeout.
    late = SetupHost(
        "late", _jobctl(Interrupt(130, "interrupted"), Pause(1), Raw(PID_LINE % 22), Hang())
    )
    batch = _batch({"late": late})
    with pytest.raises(StopJob):
        wait_guarded(batch, 30, {"late"})
    assert len(late.kills) == 1 and "-22" in late.kills[0] and "= 4321 ]" in late.kills[0]
    assert late.process.closed and not batch.running("late")


def test_only_setups_still_running_are_killed_when_given_up_on() -> None:
    hosts = {
        "stuck": SetupHost("stuck", _jobctl(Raw(PID_LINE % 11), Hang())),
        "set-up": SetupHost("set-up", _jobctl(Raw(PID_LINE % 22 + b"@@setup@@ done\n"), Hang())),
        "ended": SetupHost("ended", _jobctl(Raw(PID_LINE % 33), Exit(1))),
        "no-setup": SetupHost("no-setup", _jobctl(Raw(PID_LINE % 44), Hang())),
    }
    started = time.monotonic()
    finished = wait_guarded(_batch(hosts), 0.3, {"stuck", "set-up", "ended"})
    assert [len(host.kills) for host in hosts.values()] == [1, 0, 0, 0]
    assert finished["stuck"].status is None and finished["ended"].status == 1
    assert time.monotonic() - started < 0.3 + REPORT_WAIT_S  # no read-on: every PID was known
    assert all(host.process.closed for host in hosts.values())


def test_jobctl_answers_pass_through_untouched() -> None:
    host = SetupHost("a", _jobctl(Raw(PID_LINE % 11 + b"@@setup@@ done\nanswer\n"), Exit(0)))
    finished = wait_guarded(_batch({"a": host}), 5, {"a"})
    assert finished["a"].status == 0 and finished["a"].out.endswith(b"answer\n")
    assert host.kills == []
