"""Which masters being established are up, or have ended: two system calls a look.

The master loop looks every 10 ms. It asked each running master on its own
(``os.path.exists`` on its control socket, then ``waitpid``): with the default
fan-out of 64 that was 128 system calls and as many Python calls per look, for
as long as the handshakes took (~2.5 s for 32 OpenSSH handshakes on this 2-core
machine). Here a look is one ``listdir`` of the control directory (ssh renames
each socket into place once the master is authenticated) and one ``waitid``
that says whether any child has ended, without reaping it: only then is each
running master's process asked. A round over 64 running masters, half of them
up: 168-225 us before, 66-71 us now (500 rounds, medians of 5). A whole
32-host ``exec`` did not show it beyond its run-to-run spread.

A look also keeps which sockets are new since the look before, so that the loop
asks only their masters (every master only when a child ended or a deadline
passed): asking every running master every round made 3,494 calls in one
32-host ``exec`` (~110 rounds of up to 32 masters).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from math import inf
from typing import Protocol, TypeVar


class _Watched(Protocol):
    socket: str
    """Its control socket's path."""
    deadline: float
    """When it has taken too long (``time.monotonic``)."""


Pending = TypeVar("Pending", bound=_Watched)


class Arrivals:
    """What one look at the control directory and the children found."""

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._present: frozenset[str] = frozenset()
        self._new: frozenset[str] = frozenset()
        """What the last look found that the one before did not."""
        self.child_ended = True
        """Some child has ended (or it could not be told): ask each master's process."""
        self.looked_at = -inf
        """When the last look began (``time.monotonic``): a deadline is judged by it, not by
        the time it is asked, for this process may have been stopped in between (Ctrl-Z)
        while the masters ran on: a socket put in place meanwhile was taken for a master
        that never came up."""

    def look(self) -> None:
        """Look again (once per round of the loop, before asking about any master)."""
        self.looked_at = time.monotonic()  # before the look: what it finds is no older
        before = self._present
        try:
            self._present = frozenset(os.listdir(self._directory))
        except OSError:
            self._present = frozenset()
        self._new = self._present - before
        self.child_ended = _a_child_ended()

    def due(self, running: Sequence[Pending]) -> list[Pending]:
        """Of ``running``, those to ask after this look: whose socket is new, or all of them
        when a child ended or the earliest deadline has passed."""
        if self.child_ended or self.past_deadline(min((m.deadline for m in running), default=inf)):
            return list(running)
        if not self._new:
            return []
        return [master for master in running if os.path.basename(master.socket) in self._new]

    def past_deadline(self, deadline: float) -> bool:
        """``deadline`` had passed when the last look began: what it found not up was late."""
        return self.looked_at >= deadline

    def up(self, socket: str) -> bool:
        """The master whose control socket is ``socket`` has put it in place."""
        return os.path.basename(socket) in self._present


def _a_child_ended() -> bool:
    """Whether any child of this process has ended (it stays a zombie for its owner to reap)."""
    try:
        found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False  # no child at all
    except OSError:
        return True  # cannot tell: ask every master
    return found is not None
