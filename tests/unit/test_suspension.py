"""The controller's own suspensions, as one watch of its clock sees them (suspension.py)."""

from __future__ import annotations

import threading

from clusterlaunch.testing.fakes import FakeClock
from clusterlaunch.transport import paramikofailure, sshfailure
from clusterlaunch.transport.suspension import RESUME_GRACE_S, SUSPEND_GAP_S, SuspendWatch


def test_looks_close_together_are_no_suspension() -> None:
    clock = FakeClock()
    awake = SuspendWatch(clock)
    for _ in range(100):
        clock.advance(SUSPEND_GAP_S / 2)
        assert awake()
    assert awake.suspended_since(0.0) == 0.0


def test_a_jump_of_the_clock_is_a_suspension_with_a_grace_after_it() -> None:
    clock = FakeClock()
    awake = SuspendWatch(clock)
    clock.advance(12)
    assert not awake()  # the first look after the resume sees it
    for _ in range(int(RESUME_GRACE_S) - 1):  # looks a second apart: no further stop
        clock.advance(1)
        assert awake.just_resumed()
    clock.advance(1)
    assert awake() and not awake.just_resumed()


def test_every_look_counts_whoever_looks() -> None:
    """The keepalive thread, a handshake and the read loops share one watch: a stop seen
    by any of them is known to all (a watch per phase missed one begun before it)."""
    clock = FakeClock()
    awake = SuspendWatch(clock)
    clock.advance(12)
    awake()  # the preflight's loop, say
    clock.advance(0.5)
    assert not awake()  # the supervisor's first judgement, in the grace


def test_suspended_since_counts_only_what_came_after() -> None:
    clock = FakeClock(now=1000.0)
    awake = SuspendWatch(clock)
    clock.advance(5)
    awake()  # stopped 1000-1005
    clock.advance(1)
    awake()
    since = clock.now  # 1006: a handshake starts
    clock.advance(1)
    awake()
    clock.advance(20)  # stopped 1007-1027
    assert awake.suspended_since(since) == 20.0
    assert awake.suspended_since(1002.0) == 23.0  # the part of the first stop after it too
    assert awake.suspended_since(clock.now) == 0.0


def test_a_connection_that_failed_while_we_were_suspended_blames_no_server() -> None:
    """paramiko's timers ran on while we read nothing: the attempt is made again
    (sshconnect), and a last failure says why it may have failed."""
    said = "no SSH handshake with 127.0.0.12:22223 within 10 s: the server did not answer"
    assert paramikofailure.suspended(said, 24.6) == (
        f"{said} (clusterlaunch itself was suspended for 25 s of that time: "
        "the server may have answered)"
    )
    assert paramikofailure.suspended(said, 0.0) == said


def test_attempts_our_suspensions_cut_short_use_none_of_the_servers_retries() -> None:
    retries = sshfailure.Retries()
    for attempt in range(1, sshfailure.SUSPENDED_RETRIES + 1):
        again = retries.again("node0", "timed out (suspended)", ours=True)
        assert again is not None and again[1] == 0.0, again
        assert f"retry at once ({attempt}/{sshfailure.SUSPENDED_RETRIES} after" in again[0]
    assert retries.again("node0", "timed out (suspended)", ours=True) is None  # bounded
    for attempt in range(1, sshfailure.RETRIES + 1):  # the server's own: all still there
        again = retries.again("node0", "reset", ours=False)
        assert again is not None and again[1] > 0
        assert again[0].startswith(f"node0: reset; retry {attempt}/{sshfailure.RETRIES} in ")
    assert retries.again("node0", "reset", ours=False) is None


def test_time_before_looking_is_no_suspension_and_its_thread_ends_with_it() -> None:
    """The request's watch is made before the command connects (planning, a --sync scan):
    that spell is no stop. While the command runs, a thread of the watch's own looks, so
    no quiet spell of the others is one either; nested blocks share it."""
    clock = FakeClock()
    awake = SuspendWatch(clock)
    clock.advance(30)
    with awake.looking():
        with awake.looking():
            assert awake()
        assert [t.name for t in threading.enumerate()].count("suspend-watch") == 1
    assert awake.suspended_since(0.0) == 0.0
    assert "suspend-watch" not in [t.name for t in threading.enumerate()]
