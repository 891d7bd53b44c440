"""paramiko's handshake timeout still times out, with no timer thread per connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

import paramiko
import pytest

from clusterlaunch.transport.handshake import HandshakeDeadline, timed_by_deadline
from clusterlaunch.transport.suspension import SuspendWatch


@pytest.fixture
def silent_server() -> Iterator[tuple[str, int]]:
    """A server that sends an SSH banner, then never answers the key exchange."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        accepted.append(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 silent\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[:2]
    thread.join(5)
    for conn in accepted:
        conn.close()
    listener.close()


def _transport(timeout: float) -> Any:
    def make(*args: Any, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(*args, **kwargs)
        transport.handshake_timeout = timeout
        return transport

    return make


@pytest.mark.parametrize("deadline", [True, False], ids=["deadline", "paramiko's timer"])
def test_a_silent_server_times_the_handshake_out(
    silent_server: tuple[str, int], deadline: bool
) -> None:
    make = timed_by_deadline(_transport(0.5)) if deadline else _transport(0.5)
    with mock.patch("threading.Timer", wraps=threading.Timer) as timers:
        transport = make(socket.create_connection(silent_server))
        began = time.monotonic()
        with pytest.raises((paramiko.SSHException, EOFError)):
            transport.start_client(timeout=10)
        took = time.monotonic() - began
        transport.close()
    assert 0.45 < took < 3.0  # the handshake's 0.5 s, not start_client's 10 s
    assert timers.call_count == (0 if deadline else 1)


def test_the_deadline_counts_only_between_start_and_completion() -> None:
    deadline = HandshakeDeadline()
    assert not deadline.handshake_timed_out()  # not started
    deadline.start_handshake(0.0)
    time.sleep(0.01)
    assert deadline.handshake_timed_out()
    deadline.start_handshake(3600)  # a second start keeps the first deadline, as the timer
    assert deadline.handshake_timed_out()
    deadline.complete_handshake()
    assert not deadline.handshake_timed_out()


def test_a_handshake_within_its_time_does_not_time_out() -> None:
    deadline = HandshakeDeadline()
    deadline.start_handshake(3600)
    assert not deadline.handshake_timed_out()


class _Stopped(SuspendWatch):
    """A watch that saw this controller stopped for ``seconds`` since any time."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def suspended_since(self, since: float) -> float:
        return self.seconds


def test_the_deadline_moves_by_the_time_we_were_suspended() -> None:
    """A Ctrl-Z during the key exchange: its time was ours, not the server's."""
    deadline = HandshakeDeadline(_Stopped(3600))
    deadline.start_handshake(0.0)
    time.sleep(0.01)
    assert not deadline.handshake_timed_out()
    assert HandshakeDeadline(_Stopped(0.0)).handshake_timed_out() is False  # not started
