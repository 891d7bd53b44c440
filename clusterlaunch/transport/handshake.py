"""paramiko's handshake timeout kept as a deadline, without a thread per connection.

paramiko's packetizer starts a ``threading.Timer`` for every connection's key
exchange (``Transport.handshake_timeout``, 15 s), only to set a flag when it
fires, and cancels it once the handshake's messages are handled: a thread
started, woken and joined per host, 136-157 µs of CPU each (500 rounds, alone;
more among 64 handshakes' own threads). The packetizer reads that flag only
between reads of its socket, which wake at least every 0.1 s while the
connection is being set up (paramiko's own socket timeout then): a deadline
read at the same place times the handshake out as the timer did.

Its time is the connect timeout (``--connect-timeout``, the config's
``ConnectTimeout``), which the CLI documents as covering the connection, the
banners and authentication; paramiko's own 15 s cut a longer one short. The
time this controller spent suspended (Ctrl-Z) does not count: the deadline
moves by it (:mod:`.suspension`), where a timer blamed a server that had answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import paramiko

from clusterlaunch.transport.suspension import SuspendWatch


class HandshakeDeadline:
    """The packetizer's three timer methods, on a monotonic deadline that our own
    suspensions, as ``awake`` saw them, move."""

    def __init__(self, awake: SuspendWatch | None = None) -> None:
        self._awake = awake or SuspendWatch()
        self._started = 0.0
        self._deadline: float | None = None
        self._complete = False

    def start_handshake(self, timeout: float) -> None:
        """The key exchange starts: it must be done within ``timeout`` seconds."""
        if self._deadline is None:
            self._started = time.monotonic()
            self._deadline = self._started + float(timeout)

    def handshake_timed_out(self) -> bool:
        """Started, not done, and past its deadline (plus the time we were stopped since)."""
        if self._deadline is None or self._complete or time.monotonic() <= self._deadline:
            return False
        return time.monotonic() > self._deadline + self._awake.suspended_since(self._started)

    def complete_handshake(self) -> None:
        """Done: no timeout from now on."""
        if self._deadline is not None:
            self._complete = True


def timed_by_deadline(
    make: Callable[..., paramiko.Transport],
    seconds: float | None = None,
    awake: SuspendWatch | None = None,
) -> Callable[..., paramiko.Transport]:
    """``make``'s transports, their handshake timed by a :class:`HandshakeDeadline` of
    ``seconds`` (default: paramiko's own), moved by the suspensions ``awake`` sees."""

    def make_timed(*args: Any, **kwargs: Any) -> paramiko.Transport:
        transport = make(*args, **kwargs)
        if seconds is not None:
            transport.handshake_timeout = seconds
        deadline = HandshakeDeadline(awake)
        packetizer = transport.packetizer
        packetizer.start_handshake = deadline.start_handshake  # type: ignore[method-assign]
        packetizer.handshake_timed_out = deadline.handshake_timed_out  # type: ignore[method-assign]
        packetizer.complete_handshake = deadline.complete_handshake  # type: ignore[method-assign]
        return transport

    return make_timed
