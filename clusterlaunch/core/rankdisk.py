"""The disk under torchrun's per-rank files, as the user hears of it (pure).

Every byte a rank writes passes through a file in ``/tmp/clusterlaunch-UID`` on its host
(``remote/claims.py``), which the agent tails and empties behind its reads
(``remote/diskspace.py``). Where that file system fills, the ranks' writes fail (ENOSPC):
their output, the error that ended them included, is lost, and the summary could only say
"exited with code 1". So the preflight refuses a host with less than
:data:`~clusterlaunch.core.defaults.RANK_FILES_MIN_FREE` free there, ``doctor`` warns of
it, and a host whose folder fills during the job says so (its agent's ``full`` event),
which the failure summary names as the likely cause.

The fix is always room in ``/tmp`` on that host: the folder is never taken from the
environment (``TMPDIR``), so that whoever sweeps a dead agent's files finds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from clusterlaunch.core import defaults

FIX = "free space in /tmp on {host} (the folder is always in /tmp; TMPDIR does not move it)"


def size_text(count: int) -> str:
    """``count`` bytes the way a person reads them: ``812 KiB``, ``3.4 GiB``."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            value = count / (1 << shift)
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{count} bytes"


def low_space(space: Any, host: str = "that host") -> str | None:
    """A host's report of where its rank files go (``{"folder", "free"}``) with less free
    than the job needs: the preflight's problem and doctor's warning; None if it has room
    (or said nothing: an older report)."""
    if not isinstance(space, Mapping) or not isinstance(space.get("free"), int):
        return None
    free, need = space["free"], defaults.RANK_FILES_MIN_FREE
    if free >= need:
        return None
    return (
        f"only {size_text(free)} free in {space.get('folder')}, where torchrun's per-rank "
        f"files go (each rank's output waits there until it is sent; {size_text(need)} "
        f"wanted): {FIX.format(host=host)}"
    )


def full_text(host: str, event: Mapping[str, Any]) -> str:
    """A host's agent found its rank files' folder full while the job ran."""
    free = event.get("free")
    said = f" ({size_text(free)} free)" if isinstance(free, int) else ""
    return (
        f"{host}: {event.get('folder')} is full{said}: what its ranks write from now on "
        f"is lost, their errors too (no space left on device); {FIX.format(host=host)}"
    )


def likely_cause(full: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """The failure summary's addition for the hosts (name, ``full`` event) whose rank files'
    folder was full: the likely cause of the failure, or ``""`` for none."""
    where = [f"{event.get('folder')} on {host}" for host, event in full]
    if not where:
        return ""
    return (
        f"; likely cause: {', '.join(where)} was full (no space left on device), so the "
        "ranks' output there, the error included, was lost"
    )
