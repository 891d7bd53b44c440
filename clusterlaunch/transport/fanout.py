"""Bounded parallel calls that never hold up an interrupt.

``ThreadPoolExecutor`` joins its threads when its block exits and again at
interpreter exit, so a Ctrl-C while a host's SSH handshake hangs would wait out
the whole connect timeout (measured: 29 s). Here the calls run in daemon
threads and the caller waits in short slices, so the exception a signal raises
in the main thread gets through at once and unfinished calls are abandoned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from clusterlaunch.core.errors import LimitReached
from clusterlaunch.transport.proclimit import converted, start_thread

T = TypeVar("T")
R = TypeVar("R")

_SLICE_S = 0.1


class Failed(Generic[R]):
    """The exception one call raised (the other calls still ran)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def run_parallel(
    func: Callable[[T], R],
    items: Sequence[T],
    limit: int,
    name: str = "fanout",
    give_up: Callable[[T], Exception | None] | None = None,
    late: Callable[[R], None] | None = None,
) -> list[R | Failed[R]]:
    """``func(item)`` for every item, at most ``limit`` at once; results in item order.

    ``give_up(item)``, asked of each call still running every slice, may end the wait
    for it: its result is the exception returned, and its slot goes to the next item
    (a channel open on a host that stopped answering waited out paramiko's hour).
    A call given up on that returns after all has its result passed to ``late``.
    """
    results: list[R | Failed[R]] = [Failed(RuntimeError("not run"))] * len(items)
    if not items:
        return results
    slots = threading.BoundedSemaphore(max(1, limit))
    lock = threading.Lock()
    done = threading.Event()
    settled = [False] * len(items)
    running: set[int] = set()
    remaining = [len(items)]
    # The first ``limit`` calls wait until all of them are started. Otherwise each
    # Thread.start() waits for its thread to take the GIL from those already at
    # work (their handshakes), ~10 ms a thread: the 32nd host was dialled 60-100 ms
    # after the first, 25-30 ms with the gate (a 32-host exec, paramiko).
    gate = threading.Event()

    def settle(index: int, result: R | Failed[R], holds_slot: bool = True) -> bool:
        """Record ``index``'s result once (under ``lock``); False when it was already."""
        if settled[index]:
            return False
        settled[index] = True
        running.discard(index)
        results[index] = result
        if holds_slot:
            slots.release()
        remaining[0] -= 1
        if remaining[0] == 0:
            done.set()
        return True

    def call(index: int, item: T) -> None:
        gate.wait()
        try:
            result: R | Failed[R] = func(item)
        except Exception as exc:  # handed back to the caller, who decides
            result = Failed(converted(exc))  # paramiko's reader thread, say, could not start
        with lock:
            kept = settle(index, result)
        if not kept and late is not None and not isinstance(result, Failed):
            late(result)

    def give_up_on_some() -> None:
        if give_up is None:
            return
        with lock:
            waiting = sorted(running)
        for index in waiting:
            error = give_up(items[index])
            if error is not None:
                with lock:
                    settle(index, Failed(error))

    for index, item in enumerate(items):
        while not slots.acquire(timeout=_SLICE_S):
            give_up_on_some()  # and a signal handler may raise here
        with lock:
            running.add(index)
        thread = threading.Thread(target=call, args=(index, item), name=name, daemon=True)
        try:
            start_thread(thread)
        except LimitReached as exc:  # this item and the rest fail; the running ones end
            with lock:
                for rest in range(index, len(items)):
                    settle(rest, Failed(exc), holds_slot=rest == index)
            break
        if index + 1 >= limit:
            gate.set()  # the rest start as slots free: each as soon as it is started
    gate.set()
    while not done.wait(_SLICE_S):
        give_up_on_some()
    return results


def every_result(
    func: Callable[[T], R], items: Sequence[T], limit: int, name: str = "fanout"
) -> list[R]:
    """:func:`run_parallel`'s results; where a call failed, the first failure in item
    order is raised, as a loop over the items would have raised it."""
    results = run_parallel(func, items, limit, name)
    for result in results:
        if isinstance(result, Failed):
            raise result.error
    return results  # type: ignore[return-value]  # no Failed among them


def sleep_in_slices(seconds: float) -> None:
    """``time.sleep`` in short slices, for the main thread. The kernel may hand
    SIGINT to any thread (a connection's, still closing); Python then runs the
    handler only when the main thread next runs, so one 30 s sleep ignored a
    Ctrl-C to its end (the restart back-off: 1 run in 8 under load)."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(left, _SLICE_S))
