"""Byte fidelity of the controller's output path: lines, live redraws, huge lines, last lines."""

from __future__ import annotations

import io
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import lines as logs
from clusterlaunch.core.frames import Frame, FrameDecoder
from clusterlaunch.core.lines import LineBuffer, Prefixes, TailKeeper, prefix_block
from clusterlaunch.core.protocol import EVENT, NOISE, SYNC

P = b"[p] "


def feed_chunks(buffer: LineBuffer, chunks: list[bytes]) -> list[tuple[bytes, bool]]:
    """Every block the buffer passes on, with whether it continues a started line."""
    blocks = []
    for chunk in [*chunks, None]:
        block = buffer.flush() if chunk is None else buffer.feed(chunk)
        if block:
            blocks.append((block, buffer.continued))
    return blocks


# ------------------------------------------------------------------------------ LineBuffer, live \r


def test_live_redraws_pass_as_soon_as_their_carriage_return_arrives() -> None:
    buf = LineBuffer(live_cr=True)
    assert buf.feed(b"10%\r20%\r") == b"10%\r20%\r"
    assert not buf.continued and buf.line_open
    assert buf.feed(b"30%") == b""
    assert buf.feed(b"\n") == b"30%\n"
    assert not buf.continued and not buf.line_open


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    buf = LineBuffer(live_cr=True)
    assert buf.feed(b"a\r") == b"a\r"
    assert buf.feed(b"\nb") == b"\n" and buf.continued  # no prefix before this newline
    assert prefix_block(P, b"a\r") + prefix_block(P, b"\n", True) == prefix_block(P, b"a\r\n")
    assert buf.flush() == b"b" and not buf.continued


def test_tqdm_style_leading_carriage_returns() -> None:
    buf = LineBuffer(live_cr=True)
    shown = [buf.feed(b"\r  %d%%|" % pct) for pct in (10, 20, 30)]
    # Each redraw shown when the next starts; the first \r, which redraws nothing, goes
    # with the first redraw (it showed a prefix alone, a line of its own once cut).
    assert shown == [b"", b"\r  10%|\r", b"  20%|\r"]
    assert buf.feed(b"\n") == b"  30%|\n"


def test_without_live_cr_only_newlines_end_blocks() -> None:
    buf = LineBuffer()
    assert buf.feed(b"10%\r20%\r") == b""
    assert buf.feed(b"\n") == b"10%\r20%\r\n"


def test_last_line_without_newline_flushes_exactly() -> None:
    buf = LineBuffer(live_cr=True)
    assert buf.feed(b"done\nno newline") == b"done\n"
    assert buf.flush() == b"no newline"
    assert buf.line_open
    assert buf.flush() == b""


def test_huge_line_goes_on_in_pieces_with_bounded_memory() -> None:
    buf = LineBuffer(live_cr=True)
    chunk = b"x" * (1 << 20)
    fed = passed = 0
    pieces = []
    for _ in range(20):  # a 20 MiB line, no newline
        block = buf.feed(chunk)
        pieces += [buf.continued] if block else []
        passed += len(block)
        fed += len(chunk)
        assert fed - passed <= logs.MAX_PARTIAL  # never more than this held back
    assert pieces[0] is False and all(pieces[1:]) and len(pieces) > 1  # one line
    assert fed == passed + len(buf.flush()) and buf.continued


_ALPHABET = st.sampled_from([b"a", b"\xff", b"\r", b"\n", b"\r\n", b"\x00"])


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    # The patched bound is the same for every example: nothing to reset between them.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    parts=st.lists(_ALPHABET, max_size=60),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
    live=st.booleans(),
)
def test_blocks_rejoin_to_the_exact_bytes_and_prefix_like_one_block(
    monkeypatch: pytest.MonkeyPatch, parts: list[bytes], cuts: list[int], live: bool
) -> None:
    monkeypatch.setattr(logs, "MAX_PARTIAL", 5)  # pieces happen here too
    data = b"".join(parts)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in pairwise(points)]
    blocks = feed_chunks(LineBuffer(live_cr=live), chunks)
    assert b"".join(block for block, _ in blocks) == data  # nothing added, nothing lost
    streamed = b"".join(prefix_block(P, block, continued) for block, continued in blocks)
    assert streamed == prefix_block(P, data)  # split anywhere, shown the same


# ---------------------------------------------------------------------------------- prefix_block


@pytest.mark.parametrize(
    ("block", "continued", "expected"),
    [
        (b"a\n", False, b"[p] a\n"),
        (b"50%\r", False, b"[p] 50%\r"),  # a final \r: the next block brings the prefix
        (b"1\r2\r\n", False, b"[p] 1\r[p] 2\r\n"),
        (b"more of it", True, b"more of it"),  # a piece of an overlong line
        (b"end\nnext\n", True, b"end\n[p] next\n"),
        (b"", False, b""),
    ],
)
def test_prefix_block_cases(block: bytes, continued: bool, expected: bytes) -> None:
    assert prefix_block(P, block, continued) == expected


# ------------------------------------------------------------------------------------ TailKeeper


def test_tail_keeper_joins_pieces_and_shows_the_unfinished_line() -> None:
    keeper = TailKeeper(keep=3)
    keeper.add("r", b"one\ntw")
    keeper.add("r", b"o")
    assert keeper.lines("r") == ["one", "two"]
    keeper.add("r", b"!\nthree\nfour\nfi")
    assert keeper.lines("r") == ["three", "four", "fi"]


def test_tail_keeper_bounds_an_endless_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "TAIL_LINE", 8)
    keeper = TailKeeper()
    for _ in range(100):
        keeper.add("r", b"abcdef")
    assert keeper.lines("r") == ["abcdefab ... (600 bytes in all)"]
    assert len(keeper._open["r"][None][0]) == 8  # what it holds, not only what it shows


def test_tail_keeper_clips_long_lines_and_counts_their_bytes() -> None:
    """A rank's 3 MB line was quoted whole in the failure summary (stderr, controller.log)."""
    keeper = TailKeeper()
    big = b"x" * 3_000_000
    keeper.add("r", b"short\n" + big + b"\nafter\n")
    keeper.add("r", b"y" * 1500)  # a long line over three blocks, then ended
    keeper.add("r", b"y" * 1500)
    keeper.add("r", b"y" * 1500 + b"\nlast")
    assert keeper.lines("r") == [
        "short",
        "x" * logs.TAIL_LINE + " ... (3000000 bytes in all)",
        "after",
        "y" * logs.TAIL_LINE + " ... (4500 bytes in all)",
        "last",
    ]
    exact = b"z" * logs.TAIL_LINE
    keeper.add("s", exact + b"\n")
    assert keeper.lines("s") == [exact.decode()]  # not clipped: nothing was left out


# ----------------------------------------------------------------------------- FrameDecoder.finish


def test_finish_passes_on_a_frame_cut_short() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(SYNC + b"o1 10\nabc") == []
    assert decoder.finish() == [Frame(b"o1", b"abc")]
    assert decoder.finish() == []


def test_finish_shows_a_short_greeting_and_drops_a_cut_event() -> None:
    greeting = FrameDecoder()
    assert greeting.feed(b"hi\n") == []  # might be the start of a sync marker
    assert greeting.finish() == [Frame(NOISE, b"hi\n")]
    event = FrameDecoder()
    event.feed(SYNC + EVENT + b' 20\n{"event": ')
    assert event.finish() == []


# ---------------------------------------------------------------------------------- OutputRouter


def make_router(tmp_path: Path, **kwargs: object) -> tuple[OutputRouter, Console, LogDir]:
    console = Console(io.BytesIO(), io.BytesIO())
    log_dir = LogDir(str(tmp_path / "logs"))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    ranks = [(0, "h", 0), (1, "h", 1)]
    prefixes = Prefixes(ranks, ["h"], color=False)
    router = OutputRouter(prefixes, console, log_dir=log_dir, **kwargs)  # type: ignore[arg-type]
    return router, console, log_dir


def console_bytes(console: Console) -> tuple[bytes, bytes]:
    out, err = console.out.stream, console.err.stream  # GuardedStream wraps the BytesIO
    assert isinstance(out, io.BytesIO) and isinstance(err, io.BytesIO)
    return out.getvalue(), err.getvalue()


def test_rank_log_is_byte_identical_and_the_console_ends_the_line(tmp_path: Path) -> None:
    router, console, _ = make_router(tmp_path)
    written = b"\xff\xfe binary\x00\nprogress 1\rprogress 2\rlast line, no newline"
    for i in range(0, len(written), 7):
        router.rank_output(0, False, written[i : i + 7])
    router.flush_host("h", [0, 1])
    router.close()
    assert (tmp_path / "logs" / "rank-0.log").read_bytes() == written
    out, _ = console_bytes(console)
    assert out.endswith(b"last line, no newline\n")  # the console adds one for display
    assert out.count(b"[r0 h:0] ") == 4  # each line and each redraw labelled once


def test_redraw_reaches_the_console_before_the_line_ends(tmp_path: Path) -> None:
    router, console, _ = make_router(tmp_path)
    router.rank_output(1, True, b"step 1/3\r")
    _, err = console_bytes(console)
    assert err == b"[r1 h:1] step 1/3\r"  # at once, not when the line ends
    router.rank_output(1, True, b"step 2/3\rstep 3/3\n")
    _, err = console_bytes(console)
    assert err == b"[r1 h:1] step 1/3\r[r1 h:1] step 2/3\r[r1 h:1] step 3/3\n"


def test_overlong_line_is_never_split_by_an_added_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "MAX_PARTIAL", 16)
    router, console, _ = make_router(tmp_path)
    line = bytes(range(65, 91)) * 10  # 260 bytes, over the bound many times
    for i in range(0, len(line), 10):
        router.rank_output(0, False, line[i : i + 10])
    router.rank_output(0, False, b"\nafter\n")
    router.close()
    out, _ = console_bytes(console)
    assert out == b"[r0 h:0] " + line + b"\n[r0 h:0] after\n"
    assert (tmp_path / "logs" / "rank-0.log").read_bytes() == line + b"\nafter\n"
    assert router.tails.lines(0)[-1] == "after"


def test_host_output_goes_to_controller_log_with_an_ending_newline(tmp_path: Path) -> None:
    router, console, log_dir = make_router(tmp_path)
    router.host_output("h", False, b"torchrun says\nno newline")
    router.flush_host("h", [])
    router.close()
    log_dir.close()  # its opener's to close (the launch, or the restart loop): not the router's
    out, _ = console_bytes(console)
    assert out == b"[h]      torchrun says\n[h]      no newline\n"
    log = (tmp_path / "logs" / "controller.log").read_bytes()
    assert log == b"[h]      torchrun says\n[h]      no newline\n"
    assert not (tmp_path / "logs" / "rank-1.log").exists()  # empty: removed at close


def test_the_shells_lines_before_the_command_are_their_own_and_not_in_node_log(
    tmp_path: Path,
) -> None:
    console = Console(io.BytesIO(), io.BytesIO())
    log_dir = LogDir(str(tmp_path / "logs"))
    log_dir.open(["node-0.log", "controller.log"])
    prefixes = Prefixes([], ["h"], color=False)
    router = OutputRouter(prefixes, console, log_dir=log_dir, host_logs={"h": "node-0.log"})
    router.shell_output("h", b"rc says\nno new")
    router.shell_output("h", b"line at its end", ended=True)  # the agent's marker came
    router.host_output("h", False, b"hi\n")
    router.flush_host("h", [])
    router.close()
    log_dir.close()
    out, _ = console_bytes(console)
    assert out == b"[h] rc says\n[h] no newline at its end\n[h] hi\n"
    assert (tmp_path / "logs" / "controller.log").read_bytes() == out
    assert (tmp_path / "logs" / "node-0.log").read_bytes() == b"hi\n"  # the command's alone


# ------------------------------------------------------------------ the transport's last bytes


class RacingChannel:
    """A paramiko channel whose last data and EOF arrive between two of our checks."""

    def __init__(self) -> None:
        self.buffered = b""
        self.closed = False
        self._late = b"the last bytes"

    def fileno(self) -> int:
        return -1

    def recv_ready(self) -> bool:
        return bool(self.buffered)

    def recv_stderr_ready(self) -> bool:
        return False

    @property
    def eof_received(self) -> bool:
        self.buffered, self._late = self.buffered + self._late, b""  # the transport thread ran
        return True

    def exit_status_ready(self) -> bool:
        return True


def test_ssh_process_is_not_finished_while_the_last_bytes_sit_unread() -> None:
    from clusterlaunch.transport.ssh import SshProcess

    channel = RacingChannel()
    process = SshProcess(channel)  # type: ignore[arg-type]
    assert not process.finished()  # data came in with the EOF: not read yet
    channel.buffered = b""  # read now
    assert process.finished()
