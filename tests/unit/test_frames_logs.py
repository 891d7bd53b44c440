"""Frame decoding, line splitting, prefixes, tails and torchrun's root-cause block."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterlaunch.core import lines as logs
from clusterlaunch.core.frames import Frame, FrameDecoder, FrameError
from clusterlaunch.core.lines import (
    LineBuffer,
    Prefixes,
    TailKeeper,
    prefix_block,
    split_lines,
)
from clusterlaunch.core.protocol import EVENT, NOISE, SYNC
from clusterlaunch.core.rankfilter import parse_rank_filter
from clusterlaunch.core.render import rank_ranges, table
from clusterlaunch.remote.rootcause import parse_root_cause


def frame(tag: bytes, data: bytes) -> bytes:
    return tag + b" " + str(len(data)).encode() + b"\n" + data


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[Frame]:
    frames: list[Frame] = []
    for chunk in chunks:
        frames.extend(decoder.feed(chunk))
    return frames


def merged(frames: list[Frame]) -> list[Frame]:
    """Adjacent noise frames joined (noise may be cut anywhere)."""
    out: list[Frame] = []
    for f in frames:
        if out and f.tag == NOISE and out[-1].tag == NOISE:
            out[-1] = Frame(NOISE, out[-1].data + f.data)
        else:
            out.append(f)
    return out


# ------------------------------------------------------------------------------------- FrameDecoder

STREAM_FRAMES = [
    Frame(b"O", b"torchrun says hi\n"),
    Frame(b"o0", b"rank 0 line\n"),
    Frame(b"e12", b"rank 12 \xff\xfe invalid utf-8\n"),
    Frame(b"J", b'{"event": "started", "pid": 5}'),
    Frame(b"E", b""),
    Frame(b"o3", b"\n\n"),
]
NOISE_TEXT = b"Welcome to gpu-a!\nlast login: yesterday\n@@clusterlaunch-agent/0@@\n"
STREAM = NOISE_TEXT + SYNC + b"".join(frame(f.tag, f.data) for f in STREAM_FRAMES)


def test_decode_whole_stream() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == [Frame(NOISE, NOISE_TEXT), *STREAM_FRAMES]
    assert decoder.synced
    assert decoder.leftover() == b""


def test_no_noise_frame_when_sync_comes_first() -> None:
    assert FrameDecoder().feed(SYNC + frame(b"O", b"x")) == [Frame(b"O", b"x")]


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_split_at_every_byte_boundary(cut: int) -> None:
    decoder = FrameDecoder()
    frames = merged(feed_all(decoder, [STREAM[:cut], STREAM[cut:]]))
    assert frames == [Frame(NOISE, NOISE_TEXT), *STREAM_FRAMES]
    assert decoder.leftover() == b""


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    frames = merged(feed_all(decoder, [STREAM[i : i + 1] for i in range(len(STREAM))]))
    assert frames == [Frame(NOISE, NOISE_TEXT), *STREAM_FRAMES]


def test_sync_split_across_feeds_keeps_partial_marker() -> None:
    decoder = FrameDecoder()
    noise = b"x" * 100
    first = decoder.feed(noise + SYNC[:10])
    # Everything that cannot be the start of the marker is shown as noise at once.
    assert first == [Frame(NOISE, (noise + SYNC[:10])[: 110 - (len(SYNC) - 1)])]
    assert not decoder.synced
    rest = decoder.feed(SYNC[10:] + frame(b"O", b"hi"))
    assert decoder.synced
    assert merged(first + rest) == [Frame(NOISE, noise), Frame(b"O", b"hi")]


def test_short_noise_waits_for_more() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"abc") == []
    assert decoder.leftover() == b"abc"
    assert decoder.feed(b"") == []


def test_only_noise_never_synced() -> None:
    decoder = FrameDecoder()
    text = b"no agent here\n" * 10
    frames = decoder.feed(text)
    assert b"".join(f.data for f in frames) + decoder.leftover() == text
    assert all(f.tag == NOISE for f in frames)
    assert not decoder.synced


def test_zero_length_frames() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(SYNC + b"O 0\n") == [Frame(b"O", b"")]
    assert decoder.feed(b"E 0\nJ 0") == [Frame(b"E", b"")]
    assert decoder.feed(b"\n") == [Frame(b"J", b"")]
    assert decoder.feed(b"") == []


def test_incomplete_frame_is_leftover() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(SYNC + b"o1 10\nabc") == []
    assert decoder.leftover() == b"o1 10\nabc"
    assert decoder.feed(b"defghij") == [Frame(b"o1", b"abcdefghij")]


@pytest.mark.parametrize(
    "header",
    [b"O x\n", b"O\n", b" 5\n", b"O -1\n", b"O 5 5\n", b"\n", b"O" * 40],
    ids=["not-a-number", "no-size", "no-tag", "negative", "two-sizes", "empty", "too-long"],
)
def test_bad_header_raises(header: bytes) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="bad frame header"):
        decoder.feed(SYNC + header)


def test_frame_properties() -> None:
    assert Frame(b"o7", b"").rank == 7
    assert Frame(b"e12", b"").rank == 12
    assert Frame(b"O", b"").rank is None
    assert Frame(b"J", b"").rank is None
    assert [Frame(t, b"").is_stderr for t in (b"e1", b"E", b"o1", b"O", b"J")] == [
        True,
        True,
        False,
        False,
        False,
    ]
    assert Frame(EVENT, b'{"a": 1}').event() == {"a": 1}
    with pytest.raises(FrameError, match="event is not an object"):
        Frame(EVENT, b"[1]").event()


# --------------------------------------------------------------------------------------- LineBuffer


def test_line_buffer_lines_across_chunks() -> None:
    buf = LineBuffer()
    assert buf.feed(b"hel") == b""
    assert buf.feed(b"lo\nwor") == b"hello\n"
    assert buf.feed(b"ld\nand\nmore") == b"world\nand\n"
    assert buf.flush() == b"more"  # exactly as written: no newline invented
    assert buf.flush() == b""


def test_line_buffer_keeps_carriage_returns() -> None:
    buf = LineBuffer()
    assert buf.feed(b"10%\r20%\r") == b""
    assert buf.feed(b"100%\r\nnext\r") == b"10%\r20%\r100%\r\n"
    assert buf.feed(b"\n") == b"next\r\n"
    assert split_lines(b"a\r\nb\rc\n") == [b"a\r", b"b\rc"]


def test_line_buffer_flush_empty_and_exact() -> None:
    buf = LineBuffer()
    assert buf.flush() == b""
    assert buf.feed(b"done\n") == b"done\n"
    assert buf.flush() == b""
    assert buf.feed(b"") == b""


def test_line_buffer_bounds_partial_lines() -> None:
    buf = LineBuffer()
    half = b"x" * (logs.MAX_PARTIAL // 2 + 1)
    assert buf.feed(half) == b""
    assert buf.feed(half) == half + half  # over the bound: passed on as a piece, no newline
    assert buf.line_open
    assert buf.flush() == b""
    assert buf.feed(b"y" * logs.MAX_PARTIAL) == b""  # exactly the bound is still kept
    assert buf.feed(b"\n") == b"y" * logs.MAX_PARTIAL + b"\n"


def test_split_lines() -> None:
    assert split_lines(b"") == []
    assert split_lines(b"\n") == [b""]
    assert split_lines(b"a\nb\n") == [b"a", b"b"]


# ----------------------------------------------------------------------------------------- prefixes


def test_prefix_block() -> None:
    p = b"[r0] "
    assert prefix_block(p, b"") == b""
    assert prefix_block(p, b"a\n") == b"[r0] a\n"
    assert prefix_block(p, b"a\nb\n\n") == b"[r0] a\n[r0] b\n[r0] \n"
    assert prefix_block(p, b"10%\r50%\r100%\n") == b"[r0] 10%\r[r0] 50%\r[r0] 100%\n"
    assert prefix_block(p, b"a\r\nb\n") == b"[r0] a\r\n[r0] b\n"
    assert prefix_block(p, b"\xff\xfe\n") == b"[r0] \xff\xfe\n"


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (b"a\r\n", b"[p] a\r\n"),
        (b"x\na\r\n", b"[p] x\n[p] a\r\n"),
        (b"1\r2\r\n", b"[p] 1\r[p] 2\r\n"),
    ],
)
def test_prefix_block_final_crlf(block: bytes, expected: bytes) -> None:
    assert prefix_block(b"[p] ", block) == expected


def test_prefixes_alignment_without_color() -> None:
    ranks = [(0, "a", 0), (1, "a", 1), (2, "long-host", 0), (10, "long-host", 1)]
    prefixes = Prefixes(ranks, ["a", "long-host"], color=False)
    width = len("[r10 long-host:1]") + 1
    assert prefixes.rank(0) == b"[r0 a:0]".ljust(width)
    assert prefixes.rank(10) == b"[r10 long-host:1] "
    assert prefixes.host("a") == b"[a]".ljust(width)
    assert prefixes.host("long-host") == b"[long-host]".ljust(width)
    assert {len(prefixes.rank(r)) for r, _, _ in ranks} | {
        len(prefixes.host(h)) for h in ("a", "long-host")
    } == {width}
    assert prefixes.rank(99) == b"[r99] "
    assert prefixes.host("other") == b"[other] "


def test_prefixes_with_color_per_host() -> None:
    prefixes = Prefixes([(0, "a", 0), (1, "b", 0)], ["a", "b"], color=True)
    assert prefixes.rank(0) == b"\x1b[36m[r0 a:0]\x1b[0m "
    assert prefixes.rank(1) == b"\x1b[33m[r1 b:0]\x1b[0m "
    assert prefixes.host("b") == b"\x1b[33m[b]\x1b[0m" + b" " * 6


def test_prefixes_empty() -> None:
    prefixes = Prefixes([], [], color=False)
    assert prefixes.rank(0) == b"[r0] "


# -------------------------------------------------------------------------------------- rank filter


@pytest.mark.parametrize(
    ("text", "world", "expected"),
    [
        ("0,4-7", None, {0, 4, 5, 6, 7}),
        ("0,4-7", 8, {0, 4, 5, 6, 7}),
        ("3", 4, {3}),
        (" 1 , 2-2 ,1", None, {1, 2}),
        ("0-0", 1, {0}),
    ],
)
def test_parse_rank_filter(text: str, world: int | None, expected: set[int]) -> None:
    assert parse_rank_filter(text, world) == frozenset(expected)


@pytest.mark.parametrize(
    ("text", "world", "message"),
    [
        ("5-2", None, "range 5-2 runs backwards"),
        ("9", 8, "the job has ranks 0-7 only"),
        ("0-8", 8, "the job has ranks 0-7 only"),
        ("", None, "use ranks and ranges like 0,4-7"),
        ("a", None, "use ranks and ranges"),
        ("1-", None, "use ranks and ranges"),
        ("-1", None, "use ranks and ranges"),
        ("1,,2", None, "use ranks and ranges"),
        ("1-2-3", None, "use ranks and ranges"),
    ],
)
def test_parse_rank_filter_errors(text: str, world: int | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rank_filter(text, world)


def test_rank_ranges_and_table() -> None:
    assert rank_ranges([]) == ""
    assert rank_ranges([3]) == "3"
    assert rank_ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert table(("a", "bb"), [(1, "x"), ("long", "")]) == "a     bb\n1     x\nlong"


# --------------------------------------------------------------------------------------- TailKeeper


def test_tail_keeper_keeps_last_twenty_lines() -> None:
    keeper = TailKeeper()
    keeper.add("r0", b"".join(b"line %d\n" % i for i in range(15)))
    keeper.add("r0", b"")
    keeper.add("r0", b"".join(b"line %d\n" % i for i in range(15, 25)))
    keeper.add("r1", b"other\n")
    assert keeper.lines("r0") == [f"line {i}" for i in range(5, 25)]
    assert keeper.lines("r1") == ["other"]
    assert keeper.lines("nobody") == []


def test_tail_keeper_single_big_block_and_decoding() -> None:
    keeper = TailKeeper(keep=3)
    keeper.add(1, b"".join(b"%d\n" % i for i in range(1000)) + b"caf\xc3\xa9\n\xff\n")
    assert keeper.lines(1) == ["998", "999", "café", "\ufffd"][-3:]


def test_tail_keeper_quotes_a_bar_as_the_terminal_left_it() -> None:
    keeper = TailKeeper(keep=20)
    keeper.add("k", b"\rbar 1\rbar 2\rdone\nwindows\r\n\r\rlast\r")
    assert keeper.lines("k") == ["done", "windows", "last"]


def test_tail_keeper_keeps_empty_lines() -> None:
    keeper = TailKeeper(keep=20)
    keeper.add("k", b"a\n\n\nb\n")
    assert keeper.lines("k") == ["a", "", "", "b"]


# --------------------------------------------------------------------------------------- root cause

ROOT_CAUSE_EXIT = """\
[rank2]: Traceback (most recent call last):
[rank2]:   File "train.py", line 3, in <module>
[rank2]: SystemExit: 7
E0101 12:00:00.000000 1234 torch/distributed/elastic/multiprocessing/api.py:869] failed
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-01-01_12:00:01
  host      : gpu-b.example
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 4321)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-01-01_12:00:00
  host      : gpu-b.example
  rank      : 6 (local_rank: 2)
  exitcode  : 7 (pid: 1234)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

ROOT_CAUSE_SIGNAL = """\
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-01-01_12:00:00
  host      : gpu-a
  rank      : 0 (local_rank: 0)
  exitcode  : -9 (pid: 12)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12
============================================================
"""


def test_root_cause_exit_code() -> None:
    assert parse_root_cause(ROOT_CAUSE_EXIT) == {
        "rank": 6,
        "local_rank": 2,
        "exitcode": 7,
        "pid": 1234,
        "signal": None,
        "host": "gpu-b.example",
        "error_file": "<N/A>",
    }


def test_root_cause_signal() -> None:
    assert parse_root_cause(ROOT_CAUSE_SIGNAL) == {
        "rank": 0,
        "local_rank": 0,
        "exitcode": -9,
        "pid": 12,
        "signal": "SIGKILL",
        "host": "gpu-a",
        "error_file": "<N/A>",
    }


def test_root_cause_signal_older_torch_format() -> None:
    # Older torch prints the signal name only in the traceback line.
    text = ROOT_CAUSE_SIGNAL.replace("-9 (pid: 12)  (SIGKILL)", "-9 (pid: 12)")
    result = parse_root_cause(text)
    assert result is not None
    assert (result["exitcode"], result["pid"], result["signal"]) == (-9, 12, None)


def test_root_cause_non_signal_trailing_space() -> None:
    # Newer torch leaves a space where the signal name would go.
    text = ROOT_CAUSE_SIGNAL.replace("-9 (pid: 12)  (SIGKILL)", "3 (pid: 77) ")
    result = parse_root_cause(text)
    assert result is not None
    assert (result["exitcode"], result["pid"], result["signal"]) == (3, 77, None)


def test_root_cause_none() -> None:
    assert parse_root_cause("") is None
    assert parse_root_cause("Traceback (most recent call last):\nValueError: x\n") is None
    assert (
        parse_root_cause("Root Cause (first observed failure):\n[0]:\n  time : x\n=====\n") is None
    )


def test_root_cause_several_blocks_last_wins() -> None:
    second = ROOT_CAUSE_SIGNAL.replace("gpu-a", "gpu-z").replace(
        "rank      : 0 (local_rank: 0)", "rank      : 9 (local_rank: 1)"
    )
    result = parse_root_cause(ROOT_CAUSE_EXIT + "restarting...\n" + second)
    assert result is not None
    assert (result["host"], result["rank"], result["local_rank"], result["exitcode"]) == (
        "gpu-z",
        9,
        1,
        -9,
    )


def test_root_cause_ignores_text_after_block() -> None:
    text = ROOT_CAUSE_EXIT + "  rank      : 99 (local_rank: 9)\n"
    result = parse_root_cause(text)
    assert result is not None
    assert result["rank"] == 6


# ------------------------------------------------------------------------- property: frames + lines


def _round_trip(
    noise: bytes, lines: list[bytes], payload_cuts: list[int], chunk_cuts: list[int]
) -> None:
    body = b"".join(line + b"\n" for line in lines)
    payload_points = sorted({c % (len(body) + 1) for c in payload_cuts} | {0, len(body)})
    pieces = [body[a:b] for a, b in pairwise(payload_points)] or [b""]
    stream = noise + SYNC + b"".join(frame(b"o3", p) for p in pieces) + frame(b"J", b"{}")
    chunk_points = sorted({c % (len(stream) + 1) for c in chunk_cuts} | {0, len(stream)})
    chunks = [stream[a:b] for a, b in pairwise(chunk_points)]

    decoder = FrameDecoder()
    buffer = LineBuffer()
    got_noise = b""
    got_lines: list[bytes] = []
    tags = []
    for chunk in chunks:
        for f in decoder.feed(chunk):
            tags.append(f.tag)
            if f.tag == NOISE:
                got_noise += f.data
            elif f.rank == 3:
                got_lines.extend(split_lines(buffer.feed(f.data)))
    got_lines.extend(split_lines(buffer.flush()))
    assert got_noise == noise
    assert got_lines == lines
    assert tags[-1] == b"J"
    assert decoder.leftover() == b""


_line = st.binary(max_size=40).map(lambda b: b.replace(b"\n", b""))


@settings(max_examples=100, deadline=None, database=None)
@given(
    noise=st.binary(max_size=80).map(lambda b: b.replace(b"@", b"")),
    lines=st.lists(_line, max_size=20),
    payload_cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10),
    chunk_cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_property_frames_and_lines_round_trip(
    noise: bytes, lines: list[bytes], payload_cuts: list[int], chunk_cuts: list[int]
) -> None:
    _round_trip(noise, lines, payload_cuts, chunk_cuts)


def test_seeded_random_round_trip() -> None:
    rng = random.Random(1234)
    for _ in range(200):
        lines = [
            bytes(rng.choice(b"ab\r\xff\x00 ") for _ in range(rng.randrange(30)))
            for _ in range(rng.randrange(15))
        ]
        noise = bytes(rng.randrange(256) for _ in range(rng.randrange(60))).replace(b"@", b"")
        _round_trip(
            noise,
            lines,
            [rng.randrange(1000) for _ in range(rng.randrange(8))],
            [rng.randrange(1000) for _ in range(rng.randrange(40))],
        )
