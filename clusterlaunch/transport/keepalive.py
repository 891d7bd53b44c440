"""Answered keepalives for every paramiko connection of a run, from one thread.

A host counts as lost when nothing came from its server for ``dead_after``
seconds while a command runs there (``SshConnection.alive``). A server that is
silent for ``keepalive_interval`` is asked for a reply, as ssh's
``ServerAliveInterval`` asks: a ``keepalive@openssh.com`` global request
with want-reply set, which OpenSSH answers with a failure message. The answer
is not waited for: paramiko's reader thread reads it, and the connection's
socket notes the read (:func:`~clusterlaunch.transport.sshsocket.last_read`),
which the next round takes as the host's latest answer.

One thread asks for all connections. It had been a thread per connection,
each blocking in ``Transport.global_request`` until its answer: at 256 hosts
578 threads where there are now 323, and each further host cost the launch
3.62 ms of the controller's CPU where it now costs 3.07 (docs/benchmarks.md,
part U: paired rounds; a running job's cost per host-second did not change).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import paramiko
from paramiko.common import cMSG_GLOBAL_REQUEST

from clusterlaunch.core.errors import LimitReached
from clusterlaunch.transport.proclimit import start_thread

REQUEST = "keepalive@openssh.com"
SEND_WAIT_S = 0.05
"""How long a round waits for a connection's send lock (another thread sending, or a
key exchange) before it leaves that connection to the next round."""


def ask(transport: paramiko.Transport) -> bool:
    """Send a keepalive request that wants a reply, without waiting for it.

    As paramiko's ``_send_user_message`` sends, minus its wait: during a key
    exchange (``clear_to_send`` unset) or while another thread holds the send
    lock past ``SEND_WAIT_S``, nothing is sent and False is returned; the next
    round asks again. A dead host's exchange never ends, and one connection must
    not hold up the others' keepalives. clusterlaunch sends no other global
    request on these connections, so no reply is mistaken for another's.
    """
    message = paramiko.Message()
    message.add_byte(cMSG_GLOBAL_REQUEST)
    message.add_string(REQUEST)
    message.add_boolean(True)
    lock = transport.clear_to_send_lock
    if not lock.acquire(timeout=SEND_WAIT_S):
        return False
    try:
        if not transport.clear_to_send.is_set() or not transport.is_active():
            return False
        transport._send_message(message)  # type: ignore[attr-defined]
    finally:
        lock.release()
    return True


class KeepaliveLoop:
    """Every ``interval`` seconds, each member's ``keepalive_round()``; one thread for all.

    The thread starts with the first member and ends in the round that finds
    none left (a connection leaves when it closes).
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._members: set[Callable[[], None]] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, keepalive_round: Callable[[], None]) -> None:
        """Call ``keepalive_round`` every interval until it is discarded."""
        with self._lock:
            self._members.add(keepalive_round)
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="keepalive", daemon=True)
                try:
                    start_thread(thread)  # LimitReached: the next connection tries again
                except LimitReached:
                    self._members.discard(keepalive_round)
                    raise
                self._thread = thread

    def discard(self, keepalive_round: Callable[[], None]) -> None:
        """Stop calling ``keepalive_round`` (nothing if it is not a member). A bound
        method equals every other of the same object and function, so the one given to
        :meth:`add` need not be kept."""
        with self._lock:
            self._members.discard(keepalive_round)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                rounds = list(self._members)
                if not rounds:
                    self._thread = None
                    return
            for keepalive_round in rounds:
                keepalive_round()
