"""The live status line on a terminal while a launch connects, preflights and starts.

Three hosts leave 2-3 s of blank screen before the first rank prints, 64 hosts
longer. On a terminal (stderr a TTY) one line is rewritten in place
(``clusterlaunch: connected 3/3 · preflight 1/3 · started 0/3 · slowest: node2``)
and erased for good when anything else is printed; piped, nothing of it is
written (no escape codes in a log), nor under ``TERM=dumb``, a terminal that shows
them. Connections report from threads, hence the lock.

The line must never wrap: ``\r\x1b[K`` erases only the screen row the cursor is on,
so each redraw of a wrapped line left its first rows behind. It is cut to the
terminal's width, read at every draw (``os.get_terminal_size``: ~1 µs, against
~10-30 µs for the draw's own write), so a resized window is followed without a
SIGWINCH handler. A window that shrinks between two draws still wraps the line
drawn for the wider one where the terminal re-wraps its lines (tmux, VTE), and no
redraw can know whether it did (xterm cuts them instead). So the cursor waits at
the line's start, not its end: a re-wrapped line goes on below it, and each
erase clears the cursor's row and every row below (the status line is always the
last thing written); with the cursor left on the last row, the first ones stayed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence

from clusterlaunch.controller.console import Console
from clusterlaunch.core.cells import columns, cut
from clusterlaunch.core.progress import PHASES, Progress

# To the line's start, clear its row, then (cursor saved, one row down, restored) the rows
# below: a re-wrapped line's rest. Not ESC [J from the row's start: where that is the screen's
# top left, tmux (scroll-on-clear) moves the screen into its history, a row at every draw.
ERASE = b"\r\x1b[K\x1b7\x1b[B\x1b[J\x1b8"
PARK = b"\r"  # after each draw: the cursor waits at the line's start (see above)
LEAD = "clusterlaunch: "


class StatusLine:
    """Draws :class:`Progress` on stderr, if it is a terminal, until :meth:`end`."""

    def __init__(
        self,
        console: Console,
        hosts: Sequence[str],
        phases: Sequence[str] = PHASES,
        width: Callable[[], int | None] | None = None,
    ) -> None:
        """``width``: the terminal's columns now, or None for a line never cut (tests)."""
        self._console = console
        self._width = width or self._terminal_width
        self.progress = Progress(hosts, phases)
        # TERM=dumb (Emacs' shell, say) shows the escape codes: as piped, no line at all.
        self.active = console.err.isatty() and os.environ.get("TERM") != "dumb"
        self._lock = threading.Lock()
        self._drawn = False
        self._text = ""

    def mark(self, phase: str, host: str) -> None:
        with self._lock:
            self.progress.mark(phase, host)
            self._draw()

    def mark_all(self, phase: str) -> None:
        with self._lock:
            self.progress.mark_all(phase)
            self._draw()

    def end(self) -> None:
        """Erase the line; nothing more is drawn (output has begun, or the launch ended)."""
        with self._lock:
            if self._drawn:
                self._console.err.write(ERASE, stop=False)
                self._console.err.flush(stop=False)
            self.active = self._drawn = False

    def say(self, line: str) -> None:
        """One of clusterlaunch's lines while the status shows: above it, then redrawn."""
        with self._lock:
            if self._drawn:
                self._console.err.write(ERASE, stop=False)
                self._drawn = False
            self._console.say(line)
            self._draw()

    def _draw(self) -> None:
        if not self.active:  # piped: not even the text (each mark would make it)
            return
        width = self._width()
        if width is None:
            text = LEAD + self.progress.text()
        else:  # the last column spared: a terminal may wrap on a line that fills it
            room = width - 1
            text = cut(LEAD + self.progress.text(room - columns(LEAD)), room)
        if self._drawn and text == self._text:
            return
        self._console.err.write(ERASE + text.encode() + PARK, stop=False)
        self._console.err.flush(stop=False)
        self._drawn, self._text = True, text

    def _terminal_width(self) -> int | None:
        try:
            return os.get_terminal_size(self._console.err.fileno()).columns or None
        except (OSError, ValueError):  # not a terminal after all, or no descriptor
            return None
