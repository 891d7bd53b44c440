"""A line past the 4 MiB a line waits for its end comes in pieces: another stream's bytes
never land between them, in ``rank-N.log`` or in the failure summary's quoted lines.

The hostile tester's rank wrote 5,000,000 bytes on stderr and a 3,000,021-byte
line on stdout, neither ended: ``rank-1.log`` held E×4,456,448, the stdout
line, E×543,552, and the summary quoted lines of 7,456,469 and 543,552 bytes.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import lines, streammerge
from clusterlaunch.core.lines import Prefixes, TailKeeper
from clusterlaunch.core.streammerge import StreamMerge

OUT, ERR = False, True


def written(merge: StreamMerge, *steps: tuple[bool, bytes] | bool) -> bytes:
    """What the file gets: ``(stream, block)`` steps, or a stream alone for its end."""
    pieces = []
    for step in steps:
        pieces += merge.end(step) if isinstance(step, bool) else merge.add(*step)
    return b"".join(pieces)


def test_a_long_lines_pieces_stay_together_and_the_other_stream_waits() -> None:
    merge = StreamMerge()
    assert merge.add(ERR, b"EEEE") == [b"EEEE"]  # a piece: the line is open in the file
    assert merge.add(OUT, b"out 1\n") == []  # waits for the long line's end
    assert merge.add(OUT, b"start yyy") == []
    assert merge.add(ERR, b"EE") == [b"EE"]
    assert merge.end(OUT) == []  # not the open stream: nothing changes
    assert merge.end(ERR) == [b"out 1\n", b"start yyy"]  # the host ended: its last line too


def test_what_waited_comes_right_after_the_long_lines_end() -> None:
    merge = StreamMerge()
    got = written(merge, (ERR, b"EEEE"), (OUT, b"o1\n"), (OUT, b"o2\r"), (ERR, b"EE\nnext\nFF"))
    assert got == b"EEEE" + b"EE\nnext\n" + b"o1\no2\r" + b"FF"
    assert merge.add(OUT, b"o3\n") == []  # FF is a new long line's piece: open again
    assert merge.add(ERR, b"\n") == [b"\n", b"o3\n"]


def test_the_waiting_streams_own_piece_leaves_its_line_open_in_turn() -> None:
    merge = StreamMerge()
    got = written(merge, (ERR, b"EEEE"), (OUT, b"o1\nOOOO"), (ERR, b"E\n"), (ERR, b"e2\n"))
    assert got == b"EEEE" + b"E\n" + b"o1\nOOOO"  # stdout's piece is open now: e2 waits
    assert merge.add(OUT, b"O\n") == [b"O\n", b"e2\n"]


def test_line_ends_and_redraws_interleave_as_they_come() -> None:
    merge = StreamMerge()
    assert written(merge, (OUT, b"50%\r"), (ERR, b"warn\n"), (OUT, b"60%\r")) == (
        b"50%\rwarn\n60%\r"
    )


def test_a_line_without_end_gets_one_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory stays bounded: a stream without line ends cannot hold the other back forever."""
    monkeypatch.setattr(streammerge, "HELD_MAX", 10)
    merge = StreamMerge()
    assert merge.add(ERR, b"....") == [b"...."]
    assert merge.add(OUT, b"line one\n") == []
    assert merge.add(OUT, b"two\n") == [b"\n", b"line one\n", b"two\n"]
    assert merge.add(ERR, b"..\n") == [b"..\n"]  # the rest of the dots on a line of their own


def test_drain_writes_whatever_still_waits() -> None:
    merge = StreamMerge()
    assert written(merge, (ERR, b"EEEE"), (OUT, b"o\n")) == b"EEEE"
    assert merge.drain() == [b"o\n"]
    assert merge.drain() == []


def test_the_summary_quotes_each_streams_line_with_its_own_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lines, "TAIL_LINE", 4)
    keeper = TailKeeper()
    keeper.add(1, b"E" * 40, ERR)  # the piece past the cut
    keeper.add(1, b"start " + b"y" * 20, OUT)
    keeper.add(1, b"E" * 10, ERR)
    assert keeper.lines(1) == ["EEEE ... (50 bytes in all)", "star ... (26 bytes in all)"]
    keeper.add(1, b"\n", OUT)  # the host ended: the console's newline ends each line
    keeper.add(1, b"\n", ERR)
    assert keeper.lines(1) == ["star ... (26 bytes in all)", "EEEE ... (50 bytes in all)"]


def test_end_line_ends_every_streams_line() -> None:
    keeper = TailKeeper()
    keeper.add("h", b"out", OUT)
    keeper.add("h", b"err", ERR)
    keeper.end_line("h")
    keeper.add("h", b"ssh: lost\n", "transport")
    assert keeper.lines("h") == ["out", "err", "ssh: lost"]


def make_router(tmp_path: Path, exec_logs: bool = False) -> tuple[OutputRouter, Path]:
    logs_at = tmp_path / "logs"
    log_dir = LogDir(str(logs_at))
    log_dir.open(["rank-1.log", "node-0.log", "controller.log"])
    prefixes = Prefixes([(1, "node1", 0)], ["node1"], color=False)
    console = Console(io.BytesIO(), io.BytesIO())  # type: ignore[arg-type]
    host_logs = {"node1": "node-0.log"} if exec_logs else None
    return OutputRouter(prefixes, console, log_dir=log_dir, host_logs=host_logs), logs_at


def test_the_testers_rank_at_a_smaller_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "MAX_PARTIAL", 64)
    router, logs_at = make_router(tmp_path)
    stdout_line = b"start " + b"y" * 50 + b" END-NO-NEWLINE"
    router.rank_output(1, ERR, b"E" * 70)  # past the cut: passed on as a piece
    router.rank_output(1, OUT, stdout_line)  # under it: waits for its end
    router.rank_output(1, ERR, b"E" * 30)
    router.flush_host("node1", [1])
    router.close()
    assert (logs_at / "rank-1.log").read_bytes() == b"E" * 100 + stdout_line
    assert router.tails.lines(1) == [
        stdout_line.decode(),
        "E" * 100,
    ]


def test_the_summary_counts_the_real_lines_past_the_quote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lines, "MAX_PARTIAL", 64)
    monkeypatch.setattr(lines, "TAIL_LINE", 10)
    router, _ = make_router(tmp_path)
    router.rank_output(1, ERR, b"E" * 70)
    router.rank_output(1, OUT, b"y" * 50)
    router.rank_output(1, ERR, b"E" * 30)
    router.flush_host("node1", [1])
    assert router.tails.lines(1) == [
        "y" * 10 + " ... (50 bytes in all)",
        "E" * 10 + " ... (100 bytes in all)",
    ]


def test_an_exec_hosts_long_line_stays_whole_in_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lines, "MAX_PARTIAL", 64)
    router, logs_at = make_router(tmp_path, exec_logs=True)
    router.host_output("node1", OUT, b"o" * 70)
    router.host_output("node1", ERR, b"an error\n")
    router.transport_output("node1", b"ssh: a note\n")  # never in node-N.log
    router.host_output("node1", OUT, b"o" * 5 + b"\nmore\n")
    router.flush_host("node1", [])
    router.close()
    assert (logs_at / "node-0.log").read_bytes() == b"o" * 75 + b"\nmore\n" + b"an error\n"


def test_a_line_in_tiny_pieces_grows_in_place_and_passes_whole() -> None:
    """``partial + data`` copied the whole unfinished line for each write: 1 MiB in 1-byte
    pieces took 12.9 s (benchmarks/partial_lines.py has the numbers); now it grows in place."""
    buffer = lines.LineBuffer(live_cr=True)
    first = b"progress "
    assert buffer.feed(first) == b""
    assert buffer._partial is first  # a first piece is kept as it came: no copy
    assert buffer.feed(b".") == b""
    grown = buffer._partial
    for _ in range(1000):
        assert buffer.feed(b".") == b""
    assert buffer._partial is grown  # the same buffer, not a copy per write
    assert buffer.feed(b" done\nnext") == b"progress " + b"." * 1001 + b" done\n"
    assert buffer.feed(b" line") == b""
    assert buffer.flush() == b"next line"
    assert buffer.flush() == b""
