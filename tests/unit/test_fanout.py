"""The bounded fan-out used for connecting and starting."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from clusterlaunch.transport import fanout
from clusterlaunch.transport.fanout import Failed, run_parallel, sleep_in_slices


def test_results_in_order_and_failures_returned() -> None:
    def work(n: int) -> int:
        if n == 3:
            raise ValueError("three")
        time.sleep(0.01 * (5 - n))
        return n * n

    results = run_parallel(work, [0, 1, 2, 3, 4], limit=8)
    assert results[:3] == [0, 1, 4] and results[4] == 16
    failed = results[3]
    assert isinstance(failed, Failed) and str(failed.error) == "three"


def test_limit_bounds_concurrency() -> None:
    lock = threading.Lock()
    running = [0]
    peak = [0]

    def work(_: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    run_parallel(work, list(range(20)), limit=3)
    assert peak[0] == 3


def test_the_first_calls_begin_once_all_of_them_are_started() -> None:
    """A call begun early would hold the GIL from the next Thread.start()."""
    seen: dict[int, int] = {}
    first = threading.Barrier(8, timeout=5)  # none of the first 8 ends before all have looked

    def work(n: int) -> None:
        if n < 8:
            seen[n] = sum(t.name == "gated" for t in threading.enumerate())
            first.wait()

    run_parallel(work, list(range(12)), limit=8, name="gated")
    assert seen == {n: 8 for n in range(8)}


def test_no_items() -> None:
    assert run_parallel(lambda x: x, [], limit=4) == []


def test_sleep_in_slices_wakes_the_main_thread_every_slice(monkeypatch) -> None:
    """A Ctrl-C handed to another thread is heard within a slice, not at the end of the wait."""
    now = [0.0]
    slices: list[float] = []

    def sleep(seconds: float) -> None:
        slices.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(fanout.time, "sleep", sleep)
    monkeypatch.setattr(fanout.time, "monotonic", lambda: now[0])
    sleep_in_slices(0.35)
    assert slices == pytest.approx([0.1, 0.1, 0.1, 0.05])


class _Interrupted(Exception):
    pass


def test_an_interrupted_caller_leaves_the_rest_untaken() -> None:
    """Ctrl-C while connecting: the hosts not yet begun are never contacted."""
    taken: list[int] = []
    release = threading.Event()

    def work(n: int) -> int:
        taken.append(n)
        release.wait(5)
        return n

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        main = threading.get_ident()

        def interrupt_once_two_run() -> None:
            deadline = time.monotonic() + 5
            while len(taken) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            signal.pthread_kill(main, signal.SIGUSR1)

        threading.Thread(target=interrupt_once_two_run, daemon=True).start()
        with pytest.raises(_Interrupted):
            run_parallel(work, list(range(10)), limit=2)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    release.set()  # the two calls under way end; no further call was started
    time.sleep(0.1)
    assert sorted(taken) == [0, 1]


def test_a_call_given_up_on_frees_its_slot_and_its_late_result_is_handed_over() -> None:
    """A channel open on a lost host never returns (paramiko waits an hour): giving up on
    it must not hold the caller, nor the slot the next item needs."""
    release = threading.Event()
    late: list[str] = []
    given_up = TimeoutError("lost")

    def work(item: str) -> str:
        if item == "stuck":
            release.wait(10)
        return item.upper()

    started = time.monotonic()
    results = run_parallel(
        work,
        ["stuck", "a", "b"],
        limit=1,  # "a" and "b" start only once "stuck"'s slot is given back
        give_up=lambda item: given_up if item == "stuck" else None,
        late=late.append,
    )
    assert time.monotonic() - started < 5
    assert isinstance(results[0], Failed) and results[0].error is given_up
    assert results[1:] == ["A", "B"]
    release.set()
    deadline = time.monotonic() + 5
    while not late and time.monotonic() < deadline:
        time.sleep(0.01)
    assert late == ["STUCK"]  # the caller closes what started after it gave up
