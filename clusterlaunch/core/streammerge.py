"""Several streams into one file, one stream's line never split by another's bytes (pure).

``rank-N.log`` holds a rank's stdout and stderr together, interleaved at line
ends and ``\\r`` redraws, where each stream's :class:`~clusterlaunch.core.lines.LineBuffer`
passes its blocks. A line past ``MAX_PARTIAL`` comes in pieces, and the other
stream's bytes written between two of them were spliced into it: 5,000,000
bytes of stderr read back as E×4,456,448, the stdout line, E×543,552.
"""

from __future__ import annotations

HELD_MAX = 4 << 20
"""Bytes of the other streams that wait for a long line's end (memory bound); past it,
the long line is ended with a newline of ours and they are written."""


class StreamMerge:
    """One file's writes: while a stream's line is open there (a long line's piece), the
    other streams' blocks wait until it ends (a ``\\n`` or ``\\r``, or its stream ends)."""

    def __init__(self) -> None:
        self._open: object = None  # the stream whose line the file was left in the middle of
        self._held: list[tuple[object, bytes]] = []
        self._held_size = 0

    def add(self, stream: object, block: bytes) -> list[bytes]:
        """What to write now, in order, for ``stream``'s ``block``."""
        if self._open is None and block.endswith((b"\n", b"\r")):
            return [block]  # the usual block: nothing waits, none will (0.4 µs, not 1.2)
        out: list[bytes] = []
        self._take(stream, block, out)
        if self._held_size > HELD_MAX:  # a line without end: it gets one, the rest goes on
            out.append(b"\n")
            self._open = None
            self._release(out)
        return out

    def end(self, stream: object) -> list[bytes]:
        """``stream`` has ended (its host did): the blocks its open line held back, if any.
        Its last line stays as it was written, without a newline."""
        out: list[bytes] = []
        if self._open == stream:
            self._open = None
            self._release(out)
        return out

    def drain(self) -> list[bytes]:
        """Every block still held back, as :meth:`end` of the stream they wait for."""
        return self.end(self._open)

    def _take(self, stream: object, block: bytes, out: list[bytes]) -> None:
        if not block:
            return
        if self._open not in (None, stream):
            self._held.append((stream, block))
            self._held_size += len(block)
            return
        if block.endswith((b"\n", b"\r")):  # the usual block: no search
            cut = len(block)
        else:  # a piece, or a last line: where its last line end is counts if blocks wait
            cut = max(block.rfind(b"\n"), block.rfind(b"\r")) + 1 if self._held else 0
        if cut:
            out.append(block[:cut])  # the open line ends: what waited for it comes next
            self._open = None
            self._release(out)
            self._take(stream, block[cut:], out)
        else:
            out.append(block)
            self._open = stream

    def _release(self, out: list[bytes]) -> None:
        held, self._held, self._held_size = self._held, [], 0
        for stream, block in held:
            self._take(stream, block, out)
