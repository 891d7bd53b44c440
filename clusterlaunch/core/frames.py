"""Decode the agent's framed stdout (see ``clusterlaunch/remote/agent.py``).

Anything a host prints before the agent's sync marker (a chatty ``.bashrc``,
say) comes out as ``NOISE`` so it is shown rather than corrupting the frames.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SYNC = b"\n@@clusterlaunch-agent/1@@\n"
NOISE = b"N"
EVENT = b"J"
JOB_STDOUT = b"O"
JOB_STDERR = b"E"
_MAX_HEADER = 32


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
        if self.tag[:1] in (b"o", b"e"):
            return int(self.tag[1:])
        return None

    @property
    def is_stderr(self) -> bool:
        """True for the job's or a worker's stderr."""
        return self.tag[:1] in (b"e", b"E")

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
        while True:
            newline = buffer.find(b"\n", 0, _MAX_HEADER)
            if newline < 0:
                if len(buffer) >= _MAX_HEADER:
                    raise FrameError(f"bad frame header: {bytes(buffer[:_MAX_HEADER])!r}")
                break
            tag, _, size_text = bytes(buffer[:newline]).partition(b" ")
            if not tag or not size_text.isdigit():
                raise FrameError(f"bad frame header: {bytes(buffer[:newline])!r}")
            end = newline + 1 + int(size_text)
            if len(buffer) < end:
                break
            frames.append(Frame(tag, bytes(buffer[newline + 1 : end])))
            del buffer[:end]
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
        newline = rest.find(b"\n", 0, _MAX_HEADER)
        tag, _, size_text = rest[: max(newline, 0)].partition(b" ")
        if not self.synced or newline < 0 or not tag or not size_text.isdigit():
            return [Frame(NOISE, rest)]
        return [] if tag == EVENT else [Frame(tag, rest[newline + 1 :])]

    def leftover(self) -> bytes:
        """Bytes not yet decoded (shown as noise if the channel ends mid-frame)."""
        return bytes(self._buffer)
