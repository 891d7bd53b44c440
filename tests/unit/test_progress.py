"""The console before the job's own output: the status line's text, torchrun's banner folded.

Pure parts (:mod:`clusterlaunch.core.progress`) and the output router with a
real log directory: the console folds the banner, the log keeps every byte.
"""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.status import ERASE, PARK, StatusLine
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.progress import PHASES, BannerFold, Progress

# torchrun 2.x, verbatim (one logging call: a blank line, stars, the sentence, stars).
BANNER = (
    b"\n*****************************************\n"
    b"Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
    b"to avoid your system being overloaded, please further tune the variable for optimal "
    b"performance in your application as needed. \n"
    b"*****************************************\n"
)
NOTE = (
    "clusterlaunch: torchrun set OMP_NUM_THREADS=1 for each process on "
    "{} of 2 host(s) (its banner, folded; set OMP_NUM_THREADS to choose)\n"
)


def test_progress_counts_each_phase_and_names_the_slowest() -> None:
    progress = Progress(["node0", "node1", "node2"])
    assert progress.text() == "connected 0/3 · preflight 0/3 · started 0/3"
    progress.mark("connected", "node0")
    progress.mark("connected", "node2")
    assert progress.text() == "connected 2/3 · preflight 0/3 · started 0/3 · slowest: node1"
    progress.mark("started", "node1")  # a later phase implies the earlier ones
    progress.mark_all("preflight")
    assert progress.text() == "connected 3/3 · preflight 3/3 · started 1/3 · slowest: node0"
    assert not progress.complete("started") and progress.complete("preflight")


def test_the_banner_is_taken_out_and_said_once_when_every_host_said_it() -> None:
    fold = BannerFold(2)
    assert fold.feed("a", b"before\n" + BANNER + b"after\n") == b"before\nafter\n"
    assert fold.note() is None  # one host of two so far
    assert fold.feed("b", BANNER) == b""
    assert fold.note() == NOTE.format(2)[len("clusterlaunch: ") : -1]
    assert fold.note(final=True) is None  # said once


def test_lines_that_only_look_alike_are_kept() -> None:
    fold = BannerFold(1)
    text = b"\nSetting OMP_NUM_THREADS=4 by hand\n***\n"
    assert fold.feed("a", text) == text and fold.note(final=True) is None


def test_only_the_whole_banner_is_folded() -> None:
    """A line of stars, or stars around other words, is the program's, not torchrun's."""
    fold = BannerFold(1)
    stars = b"*" * 41 + b"\n"
    text = b"\n" + stars + b"Results\n" + stars + b"\n" + stars
    assert fold.feed("a", text) == text
    assert fold.feed("a", b"OMP_NUM_THREADS=8\n" + stars) == b"OMP_NUM_THREADS=8\n" + stars
    assert fold.feed("a", stars + BANNER + stars) == stars + stars and fold.value == "1"


def _router(tmp_path: Path, err: io.BytesIO) -> OutputRouter:
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    prefixes = Prefixes([(0, "a", 0), (1, "b", 0)], ["a", "b"], color=False)
    return OutputRouter(prefixes, Console(io.BytesIO(), err), log_dir=log_dir)


def test_the_console_folds_the_banner_and_the_log_keeps_every_byte(tmp_path: Path) -> None:
    err = io.BytesIO()
    router = _router(tmp_path, err)
    router.host_output("a", True, BANNER)
    router.host_output("b", True, BANNER + b"torchrun says more\n")
    router.rank_output(0, False, b"hello\n")
    router.close()
    assert err.getvalue().decode() == NOTE.format(2) + "[b]      torchrun says more\n"
    log = (tmp_path / "controller.log").read_text()
    assert log.count("Setting OMP_NUM_THREADS") == 2 and log.count("*" * 41) == 4
    assert log.count("torchrun set OMP_NUM_THREADS=1") == 1


def test_a_host_that_never_says_it_leaves_the_count_at_the_first_rank_line(
    tmp_path: Path,
) -> None:
    err = io.BytesIO()
    router = _router(tmp_path, err)
    router.host_output("a", True, BANNER)
    router.rank_output(0, True, b"rank 0 starts\n")
    router.close()
    assert err.getvalue().decode() == NOTE.format(1) + "[r0 a:0] rank 0 starts\n"


class _Terminal(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_the_status_line_is_drawn_in_place_only_on_a_terminal_then_replaced() -> None:
    for terminal in (True, False):
        err = _Terminal() if terminal else io.BytesIO()
        console = Console(io.BytesIO(), err)
        status = StatusLine(console, ["a", "b"])
        status.mark("connected", "a")
        prefixes = Prefixes([], ["a", "b"], color=False)
        router = OutputRouter(prefixes, console, status=status)
        router.announce("job j1: 2 host(s)")
        status.mark_all("preflight")
        router.started("a")
        router.started("b")
        text = err.getvalue()
        if terminal:
            assert text == (
                ERASE
                + "clusterlaunch: connected 1/2 · preflight 0/2 · started 0/2 · slowest: b".encode()
                + PARK
                + ERASE
                + "clusterlaunch: connected 2/2 · preflight 2/2 · started 0/2".encode()
                + PARK
                + ERASE
                + "clusterlaunch: connected 2/2 · preflight 2/2 · started 1/2 · slowest: b".encode()
                + PARK
                + ERASE
                + "clusterlaunch: connected 2/2 · preflight 2/2 · started 2/2".encode()
                + PARK
                + ERASE
                + b"clusterlaunch: job j1: 2 host(s)\n"
            )
        else:  # piped: the header at once, nothing else, no escape codes
            assert text == b"clusterlaunch: job j1: 2 host(s)\n"


def _naive_text(progress: Progress, done: dict[str, set[str]]) -> str:
    """The status as first written: every host scanned for each text."""
    total = len(progress.hosts)
    parts = [f"{phase} {len(done[phase])}/{total}" for phase in progress.phases]
    current = next((p for p in progress.phases if len(done[p]) < total), None)
    if current is not None:
        waiting = [h for h in progress.hosts if h not in done[current]]
        if len(waiting) < total:
            parts.append(f"slowest: {waiting[0]}")
    return " · ".join(parts)


@given(st.lists(st.tuples(st.sampled_from(PHASES), st.integers(0, 5)), max_size=40))
def test_the_slowest_host_is_found_as_a_scan_of_every_host_would(
    marks: list[tuple[str, int]],
) -> None:
    hosts = [f"node{index}" for index in range(6)]
    progress = Progress(hosts)
    done: dict[str, set[str]] = {phase: set() for phase in PHASES}
    for phase, index in marks:
        progress.mark(phase, hosts[index])
        for earlier in PHASES[: PHASES.index(phase) + 1]:
            done[earlier].add(hosts[index])
        assert progress.text() == _naive_text(progress, done)
