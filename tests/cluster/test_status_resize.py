"""The status line and the tables on a real terminal that re-wraps its lines: tmux.

A window that shrinks between two draws of the status line re-wraps it (tmux,
VTE): the line drawn at 120 columns took three rows at 40, and the next draw's
``\\r\\x1b[K`` erased only the row the cursor was on, leaving the first ones on
the screen. The real :class:`StatusLine` draws in a tmux pane; the test resizes
the window between its draws and reads the screen (``capture-pane``, row by
row, the history too). The cells a table pads by (``core/cells.py``) are
checked against tmux's own count: where its cursor stands after the text.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterlaunch.core.cells import columns
from tests.cluster.support import REPO, _env

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux (test-programs.sh installs it)"),
]

# Prints argv[2:], draws the status line, then again at each line read from the FIFO
# (argv[1]); "end" ends it.
STATUS_DRIVER = """
import sys
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.status import StatusLine
hosts = ["gpu-node-%03d" % i for i in range(3)]
if sys.argv[2:]:  # lines above the status line: not on the screen's top row
    print("\\n".join(sys.argv[2:]), file=sys.stderr, flush=True)
status = StatusLine(Console(), hosts)
status.mark("connected", hosts[0])
with open(sys.argv[1]) as steps:
    for step in steps:
        if step.strip() == "end":
            break
        phase, index = step.split()
        status.mark(phase, hosts[int(index)])
status.end()
"""


class Pane:
    """A detached tmux window of our own (its own server socket), running one command."""

    def __init__(self, socket_name: str, width: int) -> None:
        self.tmux = ["tmux", "-L", socket_name, "-f", "/dev/null"]
        self.width = width

    def start(self, argv: list[str]) -> None:
        command = f"{shlex.join(argv)}; exec sleep 600"
        size = ["-x", str(self.width), "-y", "20"]
        subprocess.run(
            [*self.tmux, "new-session", "-d", *size, "-c", str(REPO), command],
            env={**_env(), "PYTHONPATH": str(REPO)},
            check=True,
        )

    def ask(self, *words: str) -> str:
        done = subprocess.run([*self.tmux, *words], capture_output=True, text=True, check=True)
        return done.stdout

    def rows(self) -> list[str]:
        """The rows as shown, the history's too (a shrinking window moves the top rows
        there): a re-wrapped line is several rows (no ``-J``)."""
        return self.ask("capture-pane", "-p", "-S", "-").rstrip("\n").split("\n")

    def wait_for(self, found: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not found():
            assert time.monotonic() < deadline, f"no {what}: {self.rows()}"
            time.sleep(0.05)

    def resize(self, width: int) -> None:
        """The window ``width`` wide, and its terminal too: tmux tells the pane's pty a
        little later than it reflows the screen (what the program reads, at its draw)."""
        self.ask("resize-window", "-x", str(width))
        tty = os.open(self.ask("display", "-p", "#{pane_tty}").strip(), os.O_RDWR | os.O_NOCTTY)
        try:
            self.wait_for(lambda: os.get_terminal_size(tty).columns == width, f"{width} columns")
        finally:
            os.close(tty)

    def stop(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], check=False)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    shown = Pane(f"cl-resize-{os.getpid()}-{tmp_path.name}", 120)
    try:
        yield shown
    finally:  # our own server, on our own socket: nothing else is touched
        shown.stop()


def _shown(pane: Pane) -> list[str]:
    return [row for row in pane.rows() if row.strip()]


ABOVE = ["above 1", "above 2", "above 3"]


def test_a_window_that_shrinks_between_draws_keeps_one_status_row(
    pane: Pane, tmp_path: Path
) -> None:
    """120 columns, then 40 (the line of 82 is three rows there), then 20 (two rows)."""
    steps = tmp_path / "steps"
    os.mkfifo(steps)
    pane.start([sys.executable, "-c", STATUS_DRIVER, str(steps), *ABOVE])
    with open(steps, "w") as driver:
        pane.wait_for(lambda: any("connected 1/3" in row for row in pane.rows()), "first draw")
        first = _shown(pane)
        assert first[:3] == ABOVE and len(first) == 4 and columns(first[3]) == 82, first
        for width, step, drawn in [
            (40, "connected 1", "clusterlaunch: connected 2/3"),
            (20, "connected 2", "clusterlaunch: pre…"),
        ]:
            pane.resize(width)
            driver.write(step + "\n")
            driver.flush()
            pane.wait_for(lambda drawn=drawn: drawn in pane.rows(), f"the draw at {width}")
            assert _shown(pane) == [*ABOVE, drawn]
        driver.write("end\n")
    pane.wait_for(lambda: _shown(pane) == ABOVE, "the line erased")


def test_on_the_top_row_no_draw_goes_into_the_history(pane: Pane, tmp_path: Path) -> None:
    """tmux moves a screen cleared from its top left into its history (``scroll-on-clear``):
    an erase that began there would have left a row in it at every draw."""
    steps = tmp_path / "steps"
    os.mkfifo(steps)
    pane.start([sys.executable, "-c", STATUS_DRIVER, str(steps)])
    with open(steps, "w") as driver:
        for drawn, step in [("connected 1/3", "connected 1"), ("connected 2/3", "connected 2")]:
            pane.wait_for(lambda drawn=drawn: drawn in pane.rows()[0], drawn)
            driver.write(step + "\n")
            driver.flush()
        pane.wait_for(lambda: "connected 3/3" in pane.rows()[0], "the third draw")
        assert pane.ask("display", "-p", "#{history_size}").strip() == "0"
        assert len(_shown(pane)) == 1
        driver.write("end\n")
    pane.wait_for(lambda: not _shown(pane), "the line erased")
    assert pane.ask("display", "-p", "#{history_size}").strip() == "0"


# Prints argv[1] (text with its escapes), then waits on the FIFO argv[2] (tmux's cursor read).
PRINT_DRIVER = """
import sys
sys.stdout.write(sys.argv[1])
sys.stdout.flush()
open(sys.argv[2]).read()
"""

SAMPLES = [
    "节点一",
    "e\u0301te\u0301",
    "🚀go",
    "a\u200db",
    "\u1100\u1161",
    "3.11\\x1b[2J",
    "ｆｕｌｌ",
]


@pytest.mark.parametrize("sample", SAMPLES)
def test_the_cells_counted_are_the_cells_tmux_shows(
    pane: Pane, tmp_path: Path, sample: str
) -> None:
    done = tmp_path / "done"
    os.mkfifo(done)
    pane.start([sys.executable, "-c", PRINT_DRIVER, "|" + sample + "|", str(done)])
    with open(done, "w"):
        pane.wait_for(lambda: pane.rows()[0].endswith("|"), "the text")
        assert int(pane.ask("display", "-p", "#{cursor_x}")) == columns(sample) + 2
