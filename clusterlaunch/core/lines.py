"""Incremental line splitting and rank prefixes, on bytes.

Output is never decoded on its way through: ``\\n`` never occurs inside a
multi-byte UTF-8 sequence, so splitting bytes at ``\\n`` is safe, and invalid
UTF-8 passes through unchanged. A ``\\r`` (progress bars) stays inside its
line; on the console the prefix is repeated after it so each redraw keeps its
label, and with ``live_cr`` each redraw is passed on as soon as it is complete.
Nothing is ever added to or removed from the bytes themselves: a line over
``MAX_PARTIAL`` goes on in pieces without an invented newline, and a last line
without a newline stays without one.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from clusterlaunch.core.cells import columns

MAX_PARTIAL = 4 << 20
"""A "line" longer than this without a newline is passed on in pieces (memory bound)."""

_INNER_CR = re.compile(rb"\r(?!\n|\Z)")  # a bare \r with more of the line after it
# A \r right after a line's start or another \r redraws nothing (a \r\n's aside): shown
# with its prefix, it left a line that held the prefix alone (tqdm writes \r first).
_EMPTY_REDRAW = re.compile(rb"(?<=[\r\n])\r(?!\n)")
_EMPTY_FIRST = re.compile(rb"\A\r(?!\n)")
_COLORS = (b"36", b"33", b"32", b"35", b"34", b"31", b"96", b"93", b"92", b"95", b"94", b"91")
_RESET = b"\x1b[0m"


class LineBuffer:
    """Splits one byte stream where it can be passed on, keeping the unfinished tail.

    A block ends after a ``\\n``; with ``live_cr`` also after a ``\\r``, so a
    progress bar's redraws reach the console as they happen, except a ``\\r``
    after a line's start or another ``\\r``: it redraws nothing, unless a ``\\n``
    follows, so it waits for the next byte (:func:`without_empty_redraws`). An unfinished
    line over ``MAX_PARTIAL`` bytes is passed on as a piece. After each block,
    :attr:`continued` says whether it goes on with a line an earlier block
    began (the rest of a piece, or the ``\\n`` of a ``\\r\\n`` that arrived in
    two parts), so it must not get a prefix of its own.
    """

    def __init__(self, live_cr: bool = False) -> None:
        self._partial: bytes | bytearray = b""  # the unfinished tail (see _grown)
        self._live_cr = live_cr
        self._last = b"\n"  # the last byte passed on (as if after a newline at first)
        self.continued = False

    @property
    def line_open(self) -> bool:
        """The last block did not end with a newline (a redraw or a piece)."""
        return self._last != b"\n"

    def feed(self, data: bytes) -> bytes:
        """The bytes that ``data`` lets pass, as one block (possibly b"")."""
        # The unfinished tail holds no line end (but a held \r), so only ``data`` is searched,
        # and a ``\r`` only after its last newline (a block of 1M lines has none to find).
        end = data.rfind(b"\n") + 1
        if self._live_cr:
            end = max(end, data.rfind(b"\r", end) + 1)
            if end and data[end - 1] == 0x0D:  # one that redraws nothing waits: a \r\n's?
                before = data[end - 2 : end - 1] or self._partial[-1:] or self._last
                end -= before in (b"\r", b"\n")
        partial = self._partial
        if (len(data) - end if end else len(partial) + len(data)) > MAX_PARTIAL:
            end = len(data)
        if not end:
            self._partial = _grown(partial, data)
            return b""
        # One copy at most: the tail joined to the new lines, or a slice of ``data``
        # (none when all of it passes).
        block = b"".join((partial, memoryview(data)[:end])) if partial else data[:end]
        self._partial = data[end:]
        return self._passed(block)

    def flush(self) -> bytes:
        """The unfinished tail, exactly as it is (no newline added), or b""."""
        block, self._partial = bytes(self._partial), b""  # bytes of bytes: no copy
        return self._passed(block)

    def _passed(self, block: bytes) -> bytes:
        if block:
            after_cr = self._last == b"\r" and block.startswith(b"\n")
            self.continued = self._last not in (b"\n", b"\r") or after_cr
            self._last = block[-1:]
        return block


def _grown(partial: bytes | bytearray, data: bytes) -> bytes | bytearray:
    """``partial`` with ``data`` after it: a first piece kept as it is (no copy), then grown
    in place. ``partial + data`` copied the whole tail for each write, quadratic: 1 MiB
    in 1-byte writes took 12.9 s, 4 MiB in 100-byte writes 3.5 s (benchmarks/partial_lines.py)."""
    if not partial:
        return data
    grown = partial if isinstance(partial, bytearray) else bytearray(partial)
    grown += data
    return grown


def prefix_block(prefix: bytes, block: bytes, continued: bool = False) -> bytes:
    """Put ``prefix`` at the start of every line of ``block`` and after every bare ``\\r``.

    Nothing follows a final ``\\n`` or ``\\r``: the next block starts with its
    own prefix, unless it is ``continued`` (see :class:`LineBuffer`).
    """
    return b"".join(prefixed_pieces(prefix, block, continued))


def prefixed_pieces(
    prefix: bytes, block: bytes, continued: bool = False
) -> tuple[bytes | memoryview, ...]:
    """:func:`prefix_block`'s bytes as pieces to write one after the other.

    Whole-buffer operations (``bytes.replace`` runs in C): one pass over the
    block; the prefix the final newline got is cut off by a view, and the
    first line's prefix is a piece of its own, so the block is copied once.
    """
    if not block:
        return ()
    if b"\r" in block:
        repeated = b"\r" + prefix
        block = _INNER_CR.sub(lambda _: repeated, block)
    body: bytes | memoryview = block.replace(b"\n", b"\n" + prefix)
    if prefix and block.endswith(b"\n"):
        body = memoryview(body)[: -len(prefix)]
    return (body,) if continued or not prefix else (prefix, body)


def without_empty_redraws(block: bytes, continued: bool) -> bytes:
    """``block`` for the console, less the ``\\r`` that redraw nothing (the files keep
    them): the :class:`LineBuffer` holds one back until the byte after it tells."""
    if b"\r" not in block:
        return block
    block = _EMPTY_REDRAW.sub(b"", block)
    return block if continued else _EMPTY_FIRST.sub(b"", block, count=1)


def split_lines(block: bytes) -> list[bytes]:
    """Lines of a block, without their newlines (a final piece without one counts too)."""
    lines = block.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


class Prefixes:
    """Aligned, optionally coloured prefixes for every rank and host of a job."""

    def __init__(
        self, ranks: Iterable[tuple[int, str, int]], hosts: Iterable[str], color: bool
    ) -> None:
        rank_list = list(ranks)
        host_list = list(hosts)
        self.hosts = host_list
        labels = {rank: f"[r{rank} {host}:{local}]" for rank, host, local in rank_list}
        host_labels = {host: f"[{host}]" for host in host_list}
        every = [*labels.values(), *host_labels.values()]
        width = max((columns(label) for label in every), default=0)
        host_index = {host: index for index, host in enumerate(host_list)}
        self._rank: dict[int, bytes] = {}
        self._host: dict[str, bytes] = {}
        for rank, host, _ in rank_list:
            self._rank[rank] = _decorate(labels[rank], width, host_index.get(host, 0), color)
        for host in host_list:
            self._host[host] = _decorate(host_labels[host], width, host_index[host], color)

    def rank(self, rank: int) -> bytes:
        """Prefix for a worker line of global ``rank``."""
        return self._rank.get(rank) or f"[r{rank}] ".encode()

    def host(self, host: str) -> bytes:
        """Prefix for a host-level line (torchrun itself, the shell, the agent)."""
        return self._host.get(host) or f"[{host}] ".encode()


def _decorate(label: str, width: int, index: int, color: bool) -> bytes:
    padding = b" " * (width - columns(label) + 1)  # a host named in CJK: two cells a character
    text = label.encode()
    if color:
        text = b"\x1b[" + _COLORS[index % len(_COLORS)] + b"m" + text + _RESET
    return text + padding


TAIL_LINE = 2000
"""Bytes of one line the failure summary quotes: a rank's 3 MB line was quoted whole (on
stderr and in controller.log), and each stream's unfinished line kept up to 4 MiB."""


def _clipped(head: bytes, length: int) -> bytes:
    """A line of ``length`` bytes that begins with ``head``, as the summary quotes it."""
    if length <= TAIL_LINE:
        return head
    return head[:TAIL_LINE] + b" ... (%d bytes in all)" % length


class TailKeeper:
    """The last few lines of each key (a rank: its streams together), for the failure
    summary (each clipped), in the order they ended, the unfinished ones last.

    Each stream's unfinished line is its own: a rank's 5,000,000-byte stderr line,
    passed on in pieces, was joined to its stdout line that came between them, and
    quoted as lines of 7,456,469 and 543,552 bytes.
    """

    def __init__(self, keep: int = 20) -> None:
        self._keep = keep
        self._lines: dict[object, deque[bytes]] = {}
        # each key's unfinished lines, per stream: their start and length, oldest first
        self._open: dict[object, dict[object, tuple[bytes, int]]] = {}

    def add(self, key: object, block: bytes, stream: object = None) -> None:
        """Remember the lines of ``stream``'s block (it may end inside a line: see
        :class:`LineBuffer`)."""
        if not block:
            return
        opened = self._open.setdefault(key, {})
        head, length = opened.get(stream, (b"", 0))
        cut = block.rfind(b"\n") + 1
        if cut:
            lines = self._lines.setdefault(key, deque(maxlen=self._keep))
            # Only the last lines are copied and split: found from the end, so a
            # 1 MiB block of short lines costs a few rfinds, not two copies of it.
            start = cut - 1
            for _ in range(self._keep):
                start = block.rfind(b"\n", 0, start)
                if start < 0:
                    break
            pieces = block[start + 1 if start >= 0 else 0 : cut - 1].split(b"\n")
            complete = [_clipped(piece, len(piece)) for piece in pieces]
            if start < 0:  # fewer lines than kept: the unfinished one begins the first
                complete[0] = _clipped(head + pieces[0][:TAIL_LINE], length + len(pieces[0]))
            lines.extend(complete[-self._keep :])
            head, length = b"", 0
            opened.pop(stream, None)  # a line it opens next comes after the others' open ones
        if cut < len(block):
            rest = block[cut:]
            opened[stream] = ((head + rest[:TAIL_LINE])[:TAIL_LINE], length + len(rest))

    def end_line(self, key: object) -> None:
        """``key``'s unfinished lines are complete: another writer's line comes next."""
        lines = self._lines.setdefault(key, deque(maxlen=self._keep))
        lines.extend(_clipped(*line) for line in self._open.pop(key, {}).values())

    def lines(self, key: object) -> list[str]:
        """Remembered lines of ``key`` (the unfinished ones last), decoded for display."""
        opened = [_clipped(*line) for line in self._open.get(key, {}).values()]
        found = [*self._lines.get(key, ()), *opened][-self._keep :]
        return [_as_shown(line).decode("utf-8", "replace") for line in found]


def _as_shown(line: bytes) -> bytes:
    """A quoted line as a terminal left it: a progress bar's last redraw, not every ``\r``
    in it (which would overwrite the summary's own ``  | `` in front of it)."""
    redraws = [part for part in line.removesuffix(b"\r").split(b"\r") if part]
    return redraws[-1] if redraws else b""


class OpenLine:
    """Whose line one output is left in the middle of (a ``\\r`` redraw, a long line's piece).

    Several writers share an output (the console, ``controller.log``), and
    each stream's :class:`LineBuffer` knows only its own bytes. So that two
    writers never share a line, another writer's unfinished line is ended
    (:meth:`cut`) before anything else is written there; its owner's next
    block then starts a line of its own (:meth:`resume`).
    """

    def __init__(self) -> None:
        self._owner: object = None
        self._where: object = None

    def cut(self, owner: object = None) -> object:
        """Forget the unfinished line unless it is ``owner``'s; where a newline must go, or None."""
        if self._owner is None or self._owner == owner:
            return None
        where, self._owner, self._where = self._where, None, None
        return where

    def resume(self, owner: object, block: bytes, continued: bool) -> tuple[bytes, bool]:
        """``owner``'s next block, and whether it goes on with the line shown last.

        A ``continued`` block whose line was cut starts a new one: it gets its
        prefix, and the ``\\n`` of a split ``\\r\\n`` is dropped (the cut ended it).
        """
        if not continued or self._owner == owner:
            return block, continued
        return (block[1:] if block.startswith(b"\n") else block), False

    def wrote(self, owner: object, where: object, block: bytes) -> None:
        """``owner`` wrote ``block`` to ``where``: a line is left open unless it ended."""
        ended = block.endswith(b"\n")
        self._owner, self._where = (None, None) if ended else (owner, where)
