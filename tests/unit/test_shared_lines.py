"""Two writers never share a console line, even when one leaves its line open.

A rank's stream is split into lines on its own, so a ``\\r`` progress bar (or
a long line's piece) left as the last thing on the console used to have the
next rank's line written after it: ``[r0] progress 50%\\r[r2] hello``. The
router ends such a line first; the log files keep the rank's bytes exactly.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import lines as logs
from clusterlaunch.core.lines import Prefixes

RANKS = [(0, "node0", 0), (1, "node1", 0), (2, "node2", 0)]
P0, P1, P2 = b"[r0 node0:0] ", b"[r1 node1:0] ", b"[r2 node2:0] "
PREFIXES = {0: P0, 1: P1, 2: P2}


def make(
    tmp_path: Path, shared: bool = False, **kwargs: object
) -> tuple[OutputRouter, io.BytesIO, io.BytesIO, Path]:
    """A router over in-memory streams; ``shared``: stdout and stderr are one (a terminal)."""
    out = io.BytesIO()
    err = out if shared else io.BytesIO()
    logs_at = tmp_path / "logs"
    log_dir = LogDir(str(logs_at))
    log_dir.open([*(f"rank-{rank}.log" for rank, _, _ in RANKS), "controller.log"])
    prefixes = Prefixes(RANKS, ["node0", "node1", "node2"], color=False)
    router = OutputRouter(prefixes, Console(out, err), log_dir=log_dir, **kwargs)  # type: ignore[arg-type]
    return router, out, err, logs_at


def finish(router: OutputRouter) -> None:
    for host, rank in (("node0", 0), ("node1", 1), ("node2", 2)):
        router.flush_host(host, [rank])
    router.close()


def assert_prefixed(console: bytes) -> None:
    """Every line starts with a rank's prefix, and every redraw in it with the same one."""
    assert console.endswith(b"\n")
    for line in console[:-1].split(b"\n"):
        prefix = next((p for p in PREFIXES.values() if line.startswith(p)), None)
        assert prefix is not None, line
        for segment in line.split(b"\r")[1:]:
            assert not segment or segment.startswith(prefix), line


def test_a_bar_left_open_ends_before_another_rank_writes(tmp_path: Path) -> None:
    router, out, _, logs_at = make(tmp_path)
    router.rank_output(0, False, b"progress 50%\r")  # then rank 0 goes quiet
    router.rank_output(2, False, b"rank 2 says hello\n")
    router.rank_output(1, False, b"rank 1 says hello\n")
    finish(router)
    assert out.getvalue() == (
        P0 + b"progress 50%\r\n" + P2 + b"rank 2 says hello\n" + P1 + b"rank 1 says hello\n"
    )  # and no blank line at the end: rank 0's line was ended once
    assert (logs_at / "rank-0.log").read_bytes() == b"progress 50%\r"


def test_redraws_stay_on_one_line_while_nobody_else_writes(tmp_path: Path) -> None:
    router, out, _, _ = make(tmp_path)
    router.rank_output(0, False, b"step 1\r")
    router.rank_output(1, True, b"stderr is elsewhere\n")  # piped apart: not in the way
    router.rank_output(0, False, b"step 2\r")
    assert out.getvalue() == P0 + b"step 1\r" + P0 + b"step 2\r"


def test_the_bar_goes_on_below_and_a_split_crlf_adds_no_blank_line(tmp_path: Path) -> None:
    router, out, _, logs_at = make(tmp_path)
    router.rank_output(0, False, b"10%\r")
    router.rank_output(1, False, b"hello\n")
    router.rank_output(0, False, b"20%\r")
    router.rank_output(2, False, b"there\n")
    router.rank_output(0, False, b"\ndone\n")  # the \n of "20%\r\n": the cut ended that line
    finish(router)
    assert out.getvalue() == (
        P0 + b"10%\r\n" + P1 + b"hello\n" + P0 + b"20%\r\n" + P2 + b"there\n" + P0 + b"done\n"
    )
    assert (logs_at / "rank-0.log").read_bytes() == b"10%\r20%\r\ndone\n"


def test_on_one_terminal_stderr_and_messages_end_a_stdout_bar(tmp_path: Path) -> None:
    router, out, _, logs_at = make(tmp_path, shared=True)
    router.rank_output(0, False, b"50%\r")
    router.rank_output(0, True, b"a warning\n")  # same rank, other stream, same screen
    router.rank_output(0, False, b"60%\r")
    router.message("rank 1 on node1 exited with code 3")
    router.rank_output(2, True, b"100%\r")
    router.flush_host("node2", [2])  # the job's end: the newline comes once
    router.message("job failed")
    router.close()
    assert out.getvalue() == (
        P0 + b"50%\r\n" + P0 + b"a warning\n" + P0 + b"60%\r\n"
        b"clusterlaunch: rank 1 on node1 exited with code 3\n" + P2 + b"100%\r\n"
        b"clusterlaunch: job failed\n"
    )  # fmt: skip
    assert (logs_at / "rank-0.log").read_bytes() == b"50%\ra warning\n60%\r"


def test_console_say_ends_a_bar_too(tmp_path: Path) -> None:
    router, out, _, _ = make(tmp_path, shared=True)
    router.rank_output(0, False, b"50%\r")
    router._console.say("clusterlaunch: a note")  # as notifier() and connection notes do
    router.rank_output(0, False, b"60%\r")
    router.close()
    assert out.getvalue() == P0 + b"50%\r\nclusterlaunch: a note\n" + P0 + b"60%\r\n"


def test_an_open_bar_is_ended_when_the_router_closes(tmp_path: Path) -> None:
    router, out, err, _ = make(tmp_path)
    router.rank_output(0, False, b"50%\r")  # its host never finished (lost)
    router.close()
    assert out.getvalue() == P0 + b"50%\r\n"
    assert err.getvalue() == b""


def test_hidden_ranks_neither_show_nor_cut_a_shown_bar(tmp_path: Path) -> None:
    router, out, _, logs_at = make(tmp_path, rank_filter=frozenset({0, 2}))
    router.rank_output(0, False, b"50%\r")
    router.rank_output(1, False, b"hidden\n")
    router.rank_output(1, False, b"hidden bar\r")
    router.rank_output(0, False, b"60%\r")
    router.rank_output(2, False, b"shown\n")
    finish(router)
    assert out.getvalue() == P0 + b"50%\r" + P0 + b"60%\r\n" + P2 + b"shown\n"
    assert (logs_at / "rank-1.log").read_bytes() == b"hidden\nhidden bar\r"


def test_a_long_lines_pieces_go_on_below_another_ranks_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "MAX_PARTIAL", 8)
    router, out, _, logs_at = make(tmp_path)
    router.rank_output(0, False, b"0123456789")  # over the bound: passed on as a piece
    router.rank_output(1, False, b"hi\n")
    router.rank_output(0, False, b"abcdefghij\n")
    finish(router)
    assert out.getvalue() == P0 + b"0123456789\n" + P1 + b"hi\n" + P0 + b"abcdefghij\n"
    assert (logs_at / "rank-0.log").read_bytes() == b"0123456789abcdefghij\n"


def test_a_bars_first_carriage_return_shows_no_prefix_alone(tmp_path: Path) -> None:
    """tqdm writes a ``\\r`` before each redraw, the first too: with nothing before it, it
    showed ``[r0 node0:0] `` alone, a line of its own once another rank wrote."""
    router, out, _, logs_at = make(tmp_path)
    router.rank_output(0, False, b"\r")
    router.rank_output(1, False, b"hello\n")
    router.rank_output(0, False, b"\r  0%|\r 50%|\r")
    router.rank_output(0, False, b"\r100%|\n\r\n")  # then an empty line, CRLF: kept
    finish(router)
    bar = P0 + b"  0%|\r" + P0 + b" 50%|\r" + P0 + b"100%|\n" + P0 + b"\r\n"
    assert out.getvalue() == P1 + b"hello\n" + bar
    assert (logs_at / "rank-0.log").read_bytes() == b"\r\r  0%|\r 50%|\r\r100%|\n\r\n"


def test_a_lone_carriage_return_of_a_host_shows_nothing_either(tmp_path: Path) -> None:
    router, _, err, logs_at = make(tmp_path)
    router.host_output("node0", True, b"\r")
    router.host_output("node1", True, b"other host\n")
    router.host_output("node0", True, b"\rcopying 10%\n")
    finish(router)
    assert err.getvalue() == b"[node1]      other host\n[node0]      copying 10%\n"
    log = (logs_at / "controller.log").read_bytes()
    assert log == b"[node1]      other host\n[node0]      copying 10%\n"


def test_controller_log_gives_host_bars_and_messages_their_own_lines(tmp_path: Path) -> None:
    router, _, _, logs_at = make(tmp_path)
    router.host_output("node0", False, b"copying 10%\r")
    router.host_output("node1", False, b"other host\n")
    router.message("a message")
    router.flush_host("node0", [])
    router.close()
    lines = (logs_at / "controller.log").read_bytes().split(b"\n")
    assert lines[0].startswith(b"[node0]") and lines[0].endswith(b"copying 10%\r")
    assert lines[1].startswith(b"[node1]")
    assert lines[2].endswith(b" clusterlaunch: a message") and lines[3:] == [b""]


def test_one_pipe_for_both_streams_shares_its_lines() -> None:
    read, write = os.pipe()
    other_read, other_write = os.pipe()
    try:
        with open(write, "wb", closefd=False) as out, open(os.dup(write), "wb") as err:
            console = Console(out, err)  # 2>&1: one pipe
            assert console.open_line(console.out) is console.open_line(console.err)
        with open(write, "wb", closefd=False) as out, open(other_write, "wb") as err:
            console = Console(out, err)  # piped apart
            assert console.open_line(console.out) is not console.open_line(console.err)
    finally:
        for fd in (read, write, other_read):
            os.close(fd)


CHUNK = st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\xff"]).map(bytes)
WRITE = st.tuples(st.sampled_from([0, 1, 2]), st.lists(CHUNK, max_size=4))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.booleans(), st.lists(WRITE, max_size=30))
def test_interleaved_ranks_keep_prefixed_lines_and_exact_logs(
    tmp_path_factory: pytest.TempPathFactory, shared: bool, writes: list[tuple[int, list[bytes]]]
) -> None:
    """Rank 1 writes to stderr, the others to stdout (a rank's log interleaves its two
    streams only at line ends, so one stream each keeps the expected log simple)."""
    router, out, err, logs_at = make(tmp_path_factory.mktemp("run"), shared=shared)
    written = {rank: b"" for rank in PREFIXES}
    for rank, chunks in writes:
        data = b"".join(chunks)
        router.rank_output(rank, rank == 1, data)
        written[rank] += data
    finish(router)
    for rank, data in written.items():
        path = logs_at / f"rank-{rank}.log"
        assert (path.read_bytes() if path.exists() else b"") == data
    for console in {out.getvalue(), err.getvalue()} - {b""}:
        assert_prefixed(console)
    for rank, prefix in PREFIXES.items():  # no byte lost or doubled, newlines aside...
        console = err.getvalue() if rank == 1 else out.getvalue()
        shown = b"".join(
            line.replace(b"\r" + prefix, b"\r").removeprefix(prefix)
            for line in console.split(b"\n")
            if line.startswith(prefix)
        )
        # ...and the \r that start a line: they redraw nothing, and showed a prefix alone
        assert shown.replace(b"\r", b"") == written[rank].replace(b"\n", b"").replace(b"\r", b"")
        assert shown.count(b"\r") <= written[rank].count(b"\r")
