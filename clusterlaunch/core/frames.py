"""Decode the framed stdout of the remote programs (agent, probe, jobctl).

The format is :mod:`clusterlaunch.core.protocol`'s, shared with the programs
that write it. Anything a host prints before the sync marker (a chatty
``.bashrc``, say) comes out as ``NOISE`` so it is shown rather than corrupting
the frames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core.protocol import (
    EVENT,
    JOB_STDERR,
    MAX_HEADER,
    NOISE,
    RANK_STDERR,
    RANK_STDOUT,
    SYNC,
    parse_header,
)


class FrameError(ValueError):
    """The agent's stream is not what the protocol says (a bug, or a mangled channel)."""


@dataclass(frozen=True)
class Frame:
    """One decoded frame: ``tag`` and its raw bytes."""

    tag: bytes
    data: bytes

    @property
    def rank(self) -> int | None:
        """Global rank for worker frames (``o<rank>``/``e<rank>``), else None."""
        if self.tag[:1] in (RANK_STDOUT, RANK_STDERR):
            return int(self.tag[1:])
        return None

    @property
    def is_stderr(self) -> bool:
        """True for the job's or a worker's stderr."""
        return self.tag[:1] in (RANK_STDERR, JOB_STDERR)

    def event(self) -> dict[str, Any]:
        """The JSON payload of an ``EVENT`` frame."""
        value = json.loads(self.data)
        if not isinstance(value, dict):
            raise FrameError(f"event is not an object: {self.data[:80]!r}")
        return value


class FrameDecoder:
    """Incremental decoder: feed channel bytes, get whole frames back."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.synced = False

    def feed(self, data: bytes) -> list[Frame]:
        """Frames completed by ``data`` (possibly none)."""
        self._buffer += data
        frames: list[Frame] = []
        if not self.synced and not self._sync(frames):
            return frames
        buffer = self._buffer
        start = 0  # frames are copied out once, through a view; the buffer is cut once
        with memoryview(buffer) as view:
            while True:
                newline = buffer.find(b"\n", start, start + MAX_HEADER)
                if newline < 0:
                    if len(buffer) - start >= MAX_HEADER:
                        shown = bytes(view[start : start + MAX_HEADER])
                        raise FrameError(f"bad frame header: {shown!r}")
                    break
                header = parse_header(bytes(view[start:newline]))
                if header is None:
                    raise FrameError(f"bad frame header: {bytes(view[start:newline])!r}")
                tag, size = header
                end = newline + 1 + size
                if len(buffer) < end:
                    break
                frames.append(Frame(tag, bytes(view[newline + 1 : end])))
                start = end
        del buffer[:start]
        return frames

    def _sync(self, frames: list[Frame]) -> bool:
        index = self._buffer.find(SYNC)
        if index < 0:
            # Keep a possible partial marker; everything before it is noise.
            safe = len(self._buffer) - (len(SYNC) - 1)
            if safe > 0:
                frames.append(Frame(NOISE, bytes(self._buffer[:safe])))
                del self._buffer[:safe]
            return False
        if index:
            frames.append(Frame(NOISE, bytes(self._buffer[:index])))
        del self._buffer[: index + len(SYNC)]
        self.synced = True
        return True

    def finish(self) -> list[Frame]:
        """The channel ended: whatever is left undecoded, so no output is dropped.

        Bytes before any sync marker (a short greeting, an agent that never
        started) come out as ``NOISE``; an output frame cut short (the agent
        died mid-write) comes out with the bytes it has. A cut event means
        nothing without its end and is left out.
        """
        rest = bytes(self._buffer)
        self._buffer.clear()
        if not rest:
            return []
        newline = rest.find(b"\n", 0, MAX_HEADER)
        header = parse_header(rest[:newline]) if newline >= 0 else None
        if not self.synced or header is None:
            return [Frame(NOISE, rest)]
        return [] if header[0] == EVENT else [Frame(header[0], rest[newline + 1 :])]

    def leftover(self) -> bytes:
        """Bytes not yet decoded (shown as noise if the channel ends mid-frame)."""
        return bytes(self._buffer)
