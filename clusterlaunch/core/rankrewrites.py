"""A rank that rewrote the file its stdout or stderr passes through, as the user hears of it
(pure).

Each rank's stdout and stderr are files on its host (torchrun's ``--redirects 3``), which
the agent tails. A rank that opens ``/dev/stdout`` or ``/dev/stderr`` for writing opens
that file again and empties it: what the agent had not read yet is lost, and lines may
come out of order. The agent reads the file again from its start and leaves out the NUL
bytes the rewrite left (``remote/rewrites.py``); it says so once per rank and stream (the
``rewritten`` event), and this is what the user is told.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rewritten_text(host: str, event: Mapping[str, Any]) -> str:
    """The line for a host's ``rewritten`` event: the rank, its stream and the fix."""
    stream = "stdout" if event.get("stream") == "stdout" else "stderr"
    python = "sys.stdout" if stream == "stdout" else "sys.stderr"
    shell = ">&1" if stream == "stdout" else ">&2"
    return (
        f"{host}: rank {event.get('rank')} opened /dev/{stream} for writing, which emptied the "
        f"file its {stream} passes through: lines of it not sent by then are lost, and the "
        f"rest may be out of order; write to {shell} in a shell, {python} in Python, not "
        f"to /dev/{stream} (docs/troubleshooting.md)"
    )
