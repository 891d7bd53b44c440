"""Which signals stop the controller, and which hurry a teardown: core/interrupts.py, and
the CLI's handler that applies it (the supervisor's side: test_supervisor.py)."""

from __future__ import annotations

import signal

import pytest

from clusterlaunch.cli.main import _SignalStops
from clusterlaunch.core import interrupts
from clusterlaunch.core.errors import StopJob

INT, TERM, HUP = signal.SIGINT, signal.SIGTERM, signal.SIGHUP


@pytest.mark.parametrize("signum", [INT, TERM, HUP])
def test_the_first_signal_stops(signum: int) -> None:
    assert interrupts.stops(None, signum)


@pytest.mark.parametrize("first", [INT, TERM, HUP])
@pytest.mark.parametrize("again", [TERM, HUP])
def test_a_sighup_or_sigterm_after_any_signal_is_dropped(first: int, again: int) -> None:
    assert not interrupts.stops(first, again)


@pytest.mark.parametrize("first", [INT, TERM, HUP])
def test_a_ctrl_c_always_stops(first: int) -> None:
    assert interrupts.stops(first, INT)


def test_only_a_ctrl_c_hurries_a_teardown() -> None:
    assert interrupts.hurries(INT)
    assert not any(interrupts.hurries(signum) for signum in (TERM, HUP, None))


def test_the_handler_raises_once_for_a_closing_terminal_and_again_for_ctrl_c() -> None:
    handler = _SignalStops()
    with pytest.raises(StopJob) as first:
        handler(HUP, None)
    assert (first.value.exit_code, first.value.reason, first.value.signum) == (129, "SIGHUP", HUP)
    assert handler(HUP, None) is None  # the terminal's second SIGHUP
    assert handler(TERM, None) is None
    with pytest.raises(StopJob) as ctrl_c:
        handler(INT, None)
    assert (ctrl_c.value.exit_code, ctrl_c.value.signum) == (130, INT)


def test_each_command_has_its_own_handler() -> None:
    """main() run twice in one process (tests do): the second command's first signal stops."""
    earlier = _SignalStops()
    with pytest.raises(StopJob):
        earlier(TERM, None)
    with pytest.raises(StopJob):
        _SignalStops()(TERM, None)
