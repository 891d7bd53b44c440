"""The wire protocol from the remote programs (agent, probe, jobctl) to the controller.

One module for both ends: the programs on the hosts frame their output with
:func:`encode_frame` (it is bundled into them, see :mod:`clusterlaunch.remote`),
and the controller's :class:`clusterlaunch.core.frames.FrameDecoder` reads it
with :func:`parse_header`. So it stays stdlib-only, Python >= 3.8, and has no
``from __future__`` import (a bundle is one concatenated file). Nor ``typing``:
its import costs 3-4 ms of every agent's start (``-X importtime``), so the
annotations are strings.

A program first writes :data:`SYNC`; whatever the host's shell printed before
it (a chatty ``.bashrc``) reaches the controller as :data:`NOISE`. Then frames:
``TAG SIZE\\n`` followed by exactly SIZE bytes, so any bytes (a rank's binary
output, a half line) pass through unchanged.
"""

try:  # json.dumps's own C encoder, without the json package: see to_json
    import _json
except ImportError:  # an interpreter without it (PyPy): to_json uses json itself
    _json = None  # type: ignore[assignment]

SYNC = b"\n@@clusterlaunch/1@@\n"
"""Start of frames; the version changes whenever the framing does."""

EVENT = b"J"
"""A JSON object: the agent's ``started``/``stopping``/``exit``, the probe's
stages, jobctl's records (each with an ``event`` or ``stage`` field)."""
JOB_STDOUT = b"O"
"""torchrun's own (or the ``exec`` command's) stdout."""
JOB_STDERR = b"E"
RANK_STDOUT = b"o"
"""Followed by the global rank: ``o3`` is rank 3's stdout."""
RANK_STDERR = b"e"
NOISE = b"N"
"""Never sent: what the decoder calls the bytes before :data:`SYNC`."""

MAX_HEADER = 32
"""Longest header line, newline included; longer means the stream is garbled."""


def frame_header(tag: bytes, size: int) -> bytes:
    """The header of a frame of ``size`` bytes."""
    return b"%s %d\n" % (tag, size)


def encode_frame(tag: bytes, data: bytes) -> bytes:
    """One whole frame: header and payload as one bytes object (written in one piece)."""
    return b"".join((frame_header(tag, len(data)), data))


def encode_event(fields: "dict[str, object]") -> bytes:
    """An :data:`EVENT` frame of ``fields`` as JSON (keys sorted), for every remote program."""
    return encode_frame(EVENT, to_json(fields).encode())


def to_json(value: object) -> str:
    """``json.dumps(value, sort_keys=True)``, the same text, without importing ``json``.

    The remote programs only encode, but importing the json package compiles its
    decoder's regular expressions too: 4-6 ms of every agent's start-up (``python
    -S``, 60 rounds here). This calls the C encoder that ``json.dumps`` itself
    calls with these settings (``_json.make_encoder``, with the arguments
    ``json.encoder`` passes it); a unit test compares the two on hostile values.
    """
    if _json is None:
        import json

        return json.dumps(value, sort_keys=True)
    # markers (a fresh dict: circular references raise), default, string encoder,
    # indent, key and item separators, sort_keys, skipkeys, allow_nan.
    encode = _json.make_encoder(
        {}, _unserializable, _json.encode_basestring_ascii, None, ": ", ", ", True, False, True
    )
    return "".join(encode(value, 0))


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def rank_tag(stderr: bool, rank: int) -> bytes:
    """The tag of a worker's output frame: ``o<rank>`` or ``e<rank>``."""
    return b"%s%d" % (RANK_STDERR if stderr else RANK_STDOUT, rank)


def parse_header(line: bytes) -> "tuple[bytes, int] | None":
    """``(tag, size)`` of a header line (without its newline), or None if it is not one."""
    tag, _, size_text = line.partition(b" ")
    if not tag or not size_text.isdigit():
        return None
    return tag, int(size_text)
