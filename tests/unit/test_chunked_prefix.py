"""The controller prefixes whole chunks (bytes operations) as a per-line reference would.

Hostile input on purpose: no trailing newline, bare and split CR/LF, invalid
UTF-8, NULs, lines over the partial-line bound, and frames cut anywhere.
"""

from __future__ import annotations

import io
import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import lines
from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.lines import Prefixes, TailKeeper
from clusterlaunch.core.protocol import EVENT, JOB_STDOUT, SYNC, encode_frame

PREFIX = b"[h] "
HOSTILE = st.lists(
    st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\r\n", b"\xff", b"\xc3", b"\x00", b"\xe2\x82"]),
    max_size=60,
).map(b"".join)


def shown_redraws(data: bytes) -> bytes:
    """``data`` less each ``\\r`` that redraws nothing: one right after a line's start or
    another ``\\r``, unless a ``\\n`` follows it (an empty line's ``\\r\\n``)."""
    kept = bytearray()
    for index, byte in enumerate(data):
        empty = index == 0 or data[index - 1] in b"\r\n"
        if byte == 0x0D and empty and data[index + 1 : index + 2] != b"\n":
            continue
        kept.append(byte)
    return bytes(kept)


def reference(data: bytes, prefix: bytes = PREFIX) -> bytes:
    """Line by line, the slow obvious way: what the console must show for ``data``."""
    data = shown_redraws(data)
    if not data:
        return b""
    out = [prefix]
    for index, byte in enumerate(data):
        char = data[index : index + 1]
        out.append(char)
        more = index + 1 < len(data)
        if more and (byte == 0x0A or (byte == 0x0D and data[index + 1] != 0x0A)):
            out.append(prefix)
    if not data.endswith(b"\n"):
        out.append(b"\n")  # the console ends an unfinished last line
    return b"".join(out)


def through_router(chunks: list[bytes]) -> bytes:
    console = Console(io.BytesIO(), io.BytesIO())
    router = OutputRouter(Prefixes([], ["h"], color=False), console)
    for chunk in chunks:
        router.host_output("h", False, chunk)
    router.flush_host("h", [])
    stream = console.out.stream
    assert isinstance(stream, io.BytesIO)
    return stream.getvalue()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=300, deadline=None)
@given(HOSTILE, st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_chunked_prefixing_equals_the_per_line_reference(data: bytes, cuts: list[int]) -> None:
    assert through_router(split(data, cuts)) == reference(data)


@pytest.mark.parametrize(
    "data",
    [
        b"no newline at all",
        b"\r\r\rprogress\r",
        b"crlf\r\nsplit\r",
        b"\xff\xfe\xfd invalid utf-8\n\xc3",
        b"\n\n\n",
        b"",
    ],
)
def test_hostile_edges_in_one_byte_chunks(data: bytes) -> None:
    assert through_router([data[i : i + 1] for i in range(len(data))]) == reference(data)


def test_a_huge_line_goes_through_in_pieces_without_an_invented_newline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lines, "MAX_PARTIAL", 64)
    data = b"x" * 1000 + b"\n" + b"y" * 300
    got = through_router([data[i : i + 50] for i in range(0, len(data), 50)])
    assert got == reference(data)
    assert got.count(b"\n") == 2  # the line's own and the console's closing one


def test_many_lines_in_one_chunk_are_prefixed_in_one_pass() -> None:
    data = b"".join(b"%d\n" % i for i in range(100_000))
    got = through_router([data[:333_333], data[333_333:]])
    assert got == reference(data)


@settings(max_examples=100, deadline=None)
@given(st.lists(HOSTILE, min_size=1, max_size=6), st.lists(st.integers(0, 400), max_size=10))
def test_frames_cut_anywhere_decode_to_the_same_frames(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = SYNC + b"".join(encode_frame(JOB_STDOUT, p) for p in payloads)
    stream += encode_frame(EVENT, b'{"event": "exit"}')
    whole = FrameDecoder().feed(stream)
    decoder = FrameDecoder()
    pieces = [frame for part in split(stream, cuts) for frame in decoder.feed(part)]
    assert pieces == whole
    assert [f.data for f in whole[:-1]] == payloads


def test_tail_keeper_keeps_the_last_lines_of_a_big_block() -> None:
    tails = TailKeeper(keep=3)
    tails.add("k", b"unfinished ")
    tails.add("k", b"start\n" + b"".join(b"%d\n" % i for i in range(50_000)) + b"open")
    assert tails.lines("k") == ["49998", "49999", "open"]
    tails = TailKeeper(keep=5)
    tails.add("k", b"a")
    tails.add("k", b"b\nc\n")
    assert tails.lines("k") == ["ab", "c"]


def test_reference_agrees_with_the_docstring_rules() -> None:
    assert reference(b"a\rb\r\nc") == b"[h] a\r[h] b\r\n[h] c\n"
    assert re.fullmatch(rb"(\[h\] \d+\n)+", reference(b"1\n2\n"))
