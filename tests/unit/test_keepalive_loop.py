"""The keepalive loop and its request, without a server (the real ones: tests/cluster/
test_idle_connection.py and test_partition.py)."""

from __future__ import annotations

import threading
import time

import paramiko
from paramiko.common import MSG_GLOBAL_REQUEST

from clusterlaunch.transport import keepalive


class _Transport:
    """What ``keepalive.ask`` uses of a paramiko Transport."""

    def __init__(self, clear: bool = True, active: bool = True) -> None:
        self.clear_to_send_lock = threading.Lock()
        self.clear_to_send = threading.Event()
        if clear:
            self.clear_to_send.set()
        self.active = active
        self.sent: list[paramiko.Message] = []

    def is_active(self) -> bool:
        return self.active

    def _send_message(self, message: paramiko.Message) -> None:
        self.sent.append(message)


def test_the_request_wants_a_reply_and_is_not_waited_for() -> None:
    transport = _Transport()
    assert keepalive.ask(transport)  # type: ignore[arg-type]
    (message,) = transport.sent
    message.rewind()
    assert message.get_byte()[0] == MSG_GLOBAL_REQUEST
    assert message.get_text() == "keepalive@openssh.com" and message.get_boolean() is True
    assert not transport.clear_to_send_lock.locked()


def test_nothing_is_sent_during_a_key_exchange_a_held_lock_or_a_closed_connection() -> None:
    exchanging, closed, held = _Transport(clear=False), _Transport(active=False), _Transport()
    held.clear_to_send_lock.acquire()
    began = time.monotonic()
    for transport in (exchanging, closed, held):
        assert not keepalive.ask(transport)  # type: ignore[arg-type]
        assert transport.sent == []
    assert time.monotonic() - began < 1.0  # one connection never holds up the round
    assert not exchanging.clear_to_send_lock.locked() and not closed.clear_to_send_lock.locked()


def test_one_thread_calls_every_member_each_round_and_ends_without_members() -> None:
    loop = keepalive.KeepaliveLoop(0.05)
    calls: dict[str, int] = {"a": 0, "b": 0}

    def counter(name: str) -> None:
        calls[name] += 1

    def count_a() -> None:
        counter("a")

    def count_b() -> None:
        counter("b")

    before = set(threading.enumerate())
    loop.add(count_a)
    loop.add(count_b)
    started = [t for t in set(threading.enumerate()) - before if t.name == "keepalive"]
    assert len(started) == 1
    time.sleep(0.3)
    loop.discard(count_a)
    seen_a = calls["a"]
    time.sleep(0.2)
    assert seen_a >= 3 and calls["a"] == seen_a and calls["b"] > seen_a
    loop.discard(count_b)
    loop.discard(count_b)  # twice: nothing
    started[0].join(timeout=2)
    assert not started[0].is_alive()
    loop.add(count_a)  # a member after the end starts a new thread
    time.sleep(0.2)
    assert calls["a"] > seen_a
    loop.discard(count_a)


class _Member:
    def round(self) -> None:
        """A connection's round, given to the loop as a bound method."""


def test_a_bound_method_is_discarded_by_an_equal_one() -> None:
    """SshConnection adds ``self._keepalive_round`` and discards it at close by a new
    bound method of the same object: equal, so the member leaves."""
    loop, member = keepalive.KeepaliveLoop(60.0), _Member()
    loop.add(member.round)
    loop.discard(member.round)
    assert not loop._members
