"""A signal to the controller amid the routing of a read loses no frame from the log files.

Signals raise ``StopJob`` wherever the main thread is (cli/main.py). Raised while one
read's frames were routed, it dropped every frame not yet routed: the teardown read on,
and ``rank-2.log`` of a real job began at its line 815. The frames now wait on their host
(``controller/hostframes.py``), and the few statements that take one off and write it to
the files hold a signal's stop back (``core/interrupts.py`` ``StopHold``); console writes
let it through. The scripted hosts are :mod:`clusterlaunch.testing.fakes`'; the
supervisor, the router and the log files are the real ones.
"""

from __future__ import annotations

import io
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterlaunch.cli.main import _install_signal_handlers, _restore_signal_handlers
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core import interrupts
from clusterlaunch.core.errors import JobOutcome, StopJob
from clusterlaunch.core.interrupts import StopHold
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.testing.agentscript import FakeAgent, Hang, exits, rank_output, started, stopping
from clusterlaunch.testing.fakes import FakeConnection
from tests.unit.plans import two_ranks_per_host

CTRL_C = StopJob(130, "interrupted (Ctrl-C)", signal.SIGINT)
RANKS = [(0, "a", 0), (1, "a", 1)]


def one_read_then_teardown(last: bytes = b"bye\n") -> FakeAgent:
    """Three frames the controller reads at once; on ``t``, one more (and its exit)."""
    return FakeAgent(
        [started(), rank_output(0, b"first\n"), rank_output(1, b"second\n"),
         rank_output(0, b"third\n"), Hang()],
        on={"t": [stopping("requested"), rank_output(1, last), *exits(-15, "requested")]},
    )  # fmt: skip


class InterruptedOnce(io.BytesIO):
    """A console whose first write is cut by a Ctrl-C (a blocked terminal, say): the
    handler's stop comes out of it, as it does out of a write that blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def write(self, data: object) -> int:  # type: ignore[override]
        if not self.interrupted:
            self.interrupted = True
            raise CTRL_C
        return super().write(data)  # type: ignore[arg-type]


def supervise(
    tmp_path: Path,
    agent: FakeAgent,
    out: io.BytesIO,
    router_hook: Callable[[OutputRouter], None] | None = None,
) -> JobOutcome:
    """Run ``agent``'s job on host ``a`` with ``--log-dir tmp_path``; how it ended."""
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    router = OutputRouter(
        Prefixes(RANKS, ["a"], False), Console(out, io.BytesIO()), log_dir=log_dir
    )
    if router_hook is not None:
        router_hook(router)
    try:
        return Supervisor(
            two_ranks_per_host(["a"]), {"a": FakeConnection("a", agent)}, router
        ).run()
    finally:
        log_dir.close()


def test_a_stop_out_of_a_console_write_leaves_the_reads_later_frames_for_the_teardown(
    tmp_path: Path,
) -> None:
    """The Ctrl-C came out of the first frame's console write: the two frames after it in
    the read were dropped, in no file and never shown."""
    out = InterruptedOnce()
    outcome = supervise(tmp_path, one_read_then_teardown(), out)
    assert outcome == JobOutcome(130, "interrupted (Ctrl-C)", stopped=True)
    assert (tmp_path / "rank-0.log").read_bytes() == b"first\nthird\n"
    assert (tmp_path / "rank-1.log").read_bytes() == b"second\nbye\n"
    # The frame being written is the one the Ctrl-C cut short; every later one is shown.
    assert out.getvalue() == b"[r1 a:1] second\n[r0 a:0] third\n[r1 a:1] bye\n"


def test_a_stop_amid_a_hosts_last_flush_leaves_the_rest_for_the_teardown(tmp_path: Path) -> None:
    """The host ends with an unfinished line from each rank; a Ctrl-C comes out of the
    console write of the first: the other is flushed by the teardown, into its file."""
    agent = FakeAgent([started(), rank_output(0, b"zero"), rank_output(1, b"one"), *exits(0)])
    out = InterruptedOnce()
    outcome = supervise(tmp_path, agent, out)
    assert outcome.exit_code == 130
    assert (tmp_path / "rank-0.log").read_bytes() == b"zero"
    assert (tmp_path / "rank-1.log").read_bytes() == b"one"
    assert out.getvalue().endswith(b"[r1 a:1] one\n")


@pytest.fixture
def handlers() -> Iterator[None]:
    """The CLI's signal handlers, installed as ``main`` installs them (and put back)."""
    replaced = _install_signal_handlers()
    try:
        yield
    finally:
        _restore_signal_handlers(replaced)


def test_a_signal_while_a_frame_goes_to_the_files_waits_until_it_is_there(
    tmp_path: Path, handlers: None
) -> None:
    """SIGTERM arrives between taking the first frame off the queue and writing it (the
    router's rank hook runs there): raised at once, it lost that frame from every file."""
    sent: list[int] = []

    def signal_once() -> None:
        if not sent:
            sent.append(signal.SIGTERM)
            signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns

    def hook(router: OutputRouter) -> None:
        router.on_rank_output = signal_once

    out = io.BytesIO()
    outcome = supervise(tmp_path, one_read_then_teardown(), out, hook)
    assert outcome == JobOutcome(143, "terminated (SIGTERM)", stopped=True)
    assert (tmp_path / "rank-0.log").read_bytes() == b"first\nthird\n"
    assert (tmp_path / "rank-1.log").read_bytes() == b"second\nbye\n"
    # The stop went through before the first frame's console write.
    assert out.getvalue() == b"[r1 a:1] second\n[r0 a:0] third\n[r1 a:1] bye\n"


def test_the_installed_handler_is_the_hold_and_a_second_ctrl_c_still_gets_through(
    handlers: None,
) -> None:
    hold = interrupts.installed_hold()
    assert hold is signal.getsignal(signal.SIGTERM)
    with pytest.raises(StopJob) as ctrl_c, hold:
        signal.raise_signal(signal.SIGTERM)  # waits
        signal.raise_signal(signal.SIGINT)  # a second one: at once
        pytest.fail("the second signal did not get through")
    assert ctrl_c.value.signum == signal.SIGINT
    with hold:  # nothing left waiting
        pass


def test_without_a_handler_of_ours_the_hold_is_one_no_signal_reaches() -> None:
    hold = interrupts.installed_hold()
    assert isinstance(hold, StopHold) and hold is not interrupts.installed_hold()
    handlers = {signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    assert hold not in handlers


def test_a_stop_waits_for_the_outermost_hold() -> None:
    hold, done = StopHold(), []
    with pytest.raises(StopJob) as stop, hold:
        with hold:
            hold.deliver(CTRL_C)
            done.append("inner")
        done.append("outer")
    assert stop.value is CTRL_C and done == ["inner", "outer"]


def test_a_console_write_lets_a_waiting_stop_through_and_any_that_comes() -> None:
    hold, done = StopHold(), []
    with pytest.raises(StopJob), hold:
        hold.deliver(CTRL_C)
        done.append("logged")
        with hold.let_through():
            done.append("shown")  # never: the stop goes through first
    assert done == ["logged"]
    with pytest.raises(StopJob), hold, hold.let_through():
        hold.deliver(CTRL_C)  # during a blocked console write: at once
        done.append("after the write")
    assert done == ["logged"]


def test_after_a_console_write_the_hold_holds_again() -> None:
    hold, done = StopHold(), []
    with pytest.raises(StopJob), hold:
        with hold.let_through():
            done.append("shown")
        hold.deliver(CTRL_C)
        done.append("the next frame logged")
    assert done == ["shown", "the next frame logged"]


def test_outside_a_hold_a_stop_is_raised_at_once() -> None:
    with pytest.raises(StopJob):
        StopHold().deliver(CTRL_C)
