"""What a real terminal shows: tmux.

The cells a table pads by (``core/cells.py``) are checked against tmux's own
count: where its cursor stands after the text.
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
