"""The status line never wraps: it is cut to the terminal's width, the least telling parts first.

``\\r\\x1b[K`` erases only the screen row the cursor is on: each redraw of a
wrapped line left its first rows on the screen. The pure part
(:meth:`Progress.text` with a ``room``) is tested by equality; the status line
with a fake width, then on a real pseudo-terminal (Python's ``pty``) whose
width is set and changed, its bytes replayed on a model of the screen.
"""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import termios
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.status import ERASE, PARK, StatusLine
from clusterlaunch.core.cells import columns, cut
from clusterlaunch.core.progress import PHASES, SYNC_PHASES, Progress

HOSTS = ["gpu-node-001", "gpu-node-002", "gpu-node-003"]


def _syncing() -> Progress:
    progress = Progress(HOSTS, SYNC_PHASES)
    progress.mark_all("connected")
    progress.mark("synced", "gpu-node-001")
    return progress


def test_the_least_telling_parts_go_first_as_the_room_shrinks() -> None:
    progress = _syncing()
    whole = "connected 3/3 · synced 1/3 · preflight 0/3 · started 0/3 · slowest: gpu-node-002"
    assert progress.text() == progress.text(len(whole)) == whole
    expected = [  # a finished phase, then the phases to come (the last first), then the slowest
        "synced 1/3 · preflight 0/3 · started 0/3 · slowest: gpu-node-002",
        "synced 1/3 · preflight 0/3 · slowest: gpu-node-002",
        "synced 1/3 · slowest: gpu-node-002",
        "synced 1/3",
    ]
    for text in expected:
        assert progress.text(len(text)) == text
        assert progress.text(len(text) + 1) == text  # one column more is not room for more
    assert progress.text(6) == "synce…"  # the phase under way stays, cut short
    assert progress.text(0) == ""


def test_with_every_phase_done_the_last_stays() -> None:
    progress = Progress(["a", "b"])
    progress.mark_all("started")
    assert progress.text(20) == "started 2/2"


def test_columns_count_as_a_terminal_shows_them() -> None:
    assert columns("节点1") == 5 and columns("e\u0301") == 1
    assert cut("节点一号", 5) == "节点…" and cut("node7", 5) == "node7"


@given(
    st.lists(st.tuples(st.sampled_from(PHASES), st.integers(0, 3)), max_size=12),
    st.integers(0, 90),
)
def test_the_text_never_takes_more_than_its_room(marks: list[tuple[str, int]], room: int) -> None:
    hosts = ["gpu-node-0", "节点-1", "n2", "a-very-long-host-name-of-the-cluster-3"]
    progress = Progress(hosts)
    for phase, index in marks:
        progress.mark(phase, hosts[index])
    assert columns(progress.text(room)) <= room
    if columns(progress.text()) <= room:
        assert progress.text(room) == progress.text()  # cut only when it must be


class _Terminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


def _drawn(raw: bytes) -> list[str]:
    """Each text the status line drew (what follows each erase)."""
    return [part.removesuffix(PARK).decode() for part in raw.split(ERASE) if part]


def test_the_status_line_is_cut_to_the_width_at_each_draw() -> None:
    widths = iter([80, 50, 20, None])
    err = _Terminal()
    status = StatusLine(Console(io.BytesIO(), err), HOSTS, width=lambda: next(widths))
    status.mark("connected", "gpu-node-001")
    status.mark("connected", "gpu-node-003")  # the window is 50 columns now
    status.mark("preflight", "gpu-node-001")  # and 20
    status.mark_all("preflight")  # no width known (not a terminal after all): uncut
    assert _drawn(err.getvalue()) == [
        "clusterlaunch: connected 1/3 · preflight 0/3 · slowest: gpu-node-002",
        "clusterlaunch: connected 2/3",
        "clusterlaunch: con…",
        "clusterlaunch: connected 3/3 · preflight 3/3 · started 0/3",
    ]  # each in the width less one column: a terminal may wrap on a line that fills it


class _Screen:
    """The rows a terminal shows: text, CR, LF, EL, ED, one row down and the saved cursor;
    a character past the last column goes to the next row (xterm's wrap), and a narrower
    window cuts every row (xterm's resize, which does not reflow; tmux's, which does, is
    tests/cluster/test_status_resize.py's)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._rows: list[list[str]] = [[]]
        self._row = self._col = 0
        self._pending = False  # the last column was written: the next character wraps
        self._saved = (0, 0, False)

    def resize(self, width: int) -> None:
        self.width = width
        self._rows = [cells[:width] for cells in self._rows]
        self._col, self._pending = min(self._col, width - 1), False

    def feed(self, data: bytes) -> None:
        text = data.decode()
        index = 0
        while index < len(text):
            for sequence, act in self._controls():
                if text.startswith(sequence, index):
                    act()
                    index += len(sequence)
                    break
            else:
                self._put(text[index])
                index += 1

    def _controls(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("\x1b[K", lambda: self._rows[self._row].__delitem__(slice(self._col, None))),
            ("\x1b[J", self._erase_below),
            ("\x1b[B", self._down),
            ("\x1b7", self._save),
            ("\x1b8", self._restore),
        ]

    def _erase_below(self) -> None:
        del self._rows[self._row][self._col :]
        del self._rows[self._row + 1 :]

    def _down(self) -> None:  # rows below the last are blank: the screen model grows
        self._row += 1
        self._rows += [[] for _ in range(self._row + 1 - len(self._rows))]

    def _save(self) -> None:
        self._saved = (self._row, self._col, self._pending)

    def _restore(self) -> None:
        self._row, self._col, self._pending = self._saved

    def _put(self, char: str) -> None:
        if char == "\r":
            self._col, self._pending = 0, False
            return
        if char == "\n" or self._pending:
            self._row += 1
            self._col = 0 if self._pending else self._col
            self._pending = False
            self._rows += [[] for _ in range(self._row + 1 - len(self._rows))]
            if char == "\n":
                return
        cells = self._rows[self._row]
        cells += [" "] * (self._col + 1 - len(cells))
        cells[self._col] = char
        self._pending = self._col == self.width - 1
        self._col += 0 if self._pending else 1

    def rows(self) -> list[str]:
        """Down to the cursor's row or the last one written, whichever is lower."""
        shown = ["".join(cells).rstrip() for cells in self._rows]
        while len(shown) > self._row + 1 and not shown[-1]:
            shown.pop()
        return shown


def _set_width(fd: int, width: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, width, 0, 0))


def _read_all(fd: int) -> bytes:
    data = b""
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return data
        data += chunk


def test_on_a_real_terminal_no_status_line_is_left_on_the_screen() -> None:
    """A launch's marks on a 50-column pseudo-terminal that shrinks to 36 halfway: each
    redraw holds one row, and once the status ends the screen is as blank as it began
    (on 50 columns, each of 6-8 redraws had left a row of its own)."""
    terminal, tty_end = pty.openpty()
    screen = _Screen(50)
    try:
        _set_width(tty_end, 50)
        with open(tty_end, "wb", buffering=0, closefd=False) as err:
            status = StatusLine(Console(io.BytesIO(), err), HOSTS, SYNC_PHASES)
            for phase in SYNC_PHASES:
                for host in HOSTS:
                    status.mark(phase, host)
                    screen.feed(_read_all(terminal))
                    assert len(screen.rows()) == 1, screen.rows()
                    assert screen.rows()[0].startswith("clusterlaunch: "), screen.rows()
                if phase == "synced":
                    _set_width(tty_end, 36)
                    screen.resize(36)
            status.end()
            screen.feed(_read_all(terminal))
        assert screen.rows() == [""]
    finally:
        os.close(terminal)
        os.close(tty_end)
