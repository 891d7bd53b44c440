"""What the console shows before the job's own output: progress, and torchrun's banner folded.

Pure: the controller's :mod:`~clusterlaunch.controller.status` draws
:class:`Progress` on a terminal, and the output router passes host output
through :class:`BannerFold`. Neither touches the log files, which keep every byte.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from clusterlaunch.core.cells import columns, cut

PHASES = ("connected", "preflight", "started")
"""In order; a host counts in a phase once it has finished it."""
SYNC_PHASES = ("connected", "synced", "preflight", "started")
"""With ``--sync``: the copy to each host's workdir comes before its preflight."""


class Progress:
    """How many hosts have finished each phase of a launch, and who holds it up."""

    def __init__(self, hosts: Sequence[str], phases: Sequence[str] = PHASES) -> None:
        self.hosts = list(hosts)
        self.phases = list(phases)
        self._done: dict[str, set[str]] = {phase: set() for phase in self.phases}
        # Per phase, where the first host not yet done may be: hosts only ever finish,
        # so it only moves on. Finding it afresh on every mark made a launch O(hosts²).
        self._behind = {phase: 0 for phase in self.phases}

    def mark(self, phase: str, host: str) -> None:
        """``host`` finished ``phase`` (and so every phase before it)."""
        for earlier in self.phases[: self.phases.index(phase) + 1]:
            self._done[earlier].add(host)

    def mark_all(self, phase: str) -> None:
        for host in self.hosts:
            self.mark(phase, host)

    def complete(self, phase: str) -> bool:
        return len(self._done[phase]) == len(self.hosts)

    def text(self, room: int | None = None) -> str:
        """``connected 41/64 · preflight 12/64 · started 0/64 · slowest: gpu-17``
        (``synced 9/64`` after ``connected`` with ``--sync``).

        ``room``: the columns it may take (None: all it needs). The least telling
        parts go first: phases every host has finished (the earliest first), then
        phases still to come (the latest first), then the slowest host; the phase
        under way stays, cut short with ``…`` if it must be."""
        total = len(self.hosts)
        parts = [f"{phase} {len(self._done[phase])}/{total}" for phase in self.phases]
        current = next((i for i, p in enumerate(self.phases) if not self.complete(p)), None)
        if current is not None and self._done[self.phases[current]]:  # someone is ahead
            parts.append(f"slowest: {self._first_behind(self.phases[current])}")
        if room is None:
            return " · ".join(parts)
        under_way = len(self.phases) - 1 if current is None else current
        later = range(len(self.phases) - 1, under_way, -1)
        kept = list(range(len(parts)))
        for part in [*range(under_way), *later, *range(len(self.phases), len(parts))]:
            if columns(" · ".join(parts[i] for i in kept)) <= room:
                break
            kept.remove(part)
        return cut(" · ".join(parts[i] for i in kept), room)

    def _first_behind(self, phase: str) -> str:
        """The first host (in hosts-file order) that has not finished ``phase`` (one exists)."""
        done, index = self._done[phase], self._behind[phase]
        while self.hosts[index] in done:
            index += 1
        self._behind[phase] = index
        return self.hosts[index]


# torchrun's banner, whole (one logging call: a blank line, stars, the sentence, stars).
# Only the whole of it is folded: a line of stars a program prints stays on the console.
_BANNER = re.compile(
    rb"^\r?\n\*{20,}\r?\n"
    rb"Setting OMP_NUM_THREADS environment variable for each process to be (\S+) in default"
    rb"[^\n]*\n\*{20,}\r?\n",
    re.MULTILINE,
)


class BannerFold:
    """Takes torchrun's per-host OMP_NUM_THREADS banner out of host output (console only).

    torchrun prints it on every host (a blank line, stars, the sentence, stars)
    when OMP_NUM_THREADS is unset. :meth:`note` then says it once, for all hosts.
    """

    def __init__(self, host_count: int) -> None:
        self.host_count = host_count
        self.value: str | None = None
        self.hosts: set[str] = set()
        self.noted = False

    def feed(self, host: str, block: bytes) -> bytes:
        """``block`` (whole lines of ``host``'s output) without the banner."""
        if b"OMP_NUM_THREADS" not in block:  # one scan: most blocks are the job's output
            return block

        def fold(found: re.Match[bytes]) -> bytes:
            self.value = found[1].decode("utf-8", "replace")
            self.hosts.add(host)
            return b""

        return _BANNER.sub(fold, block)

    def note(self, final: bool = False) -> str | None:
        """The one line for the banners seen: once every host printed it (or ``final``)."""
        if self.noted or not self.hosts or (len(self.hosts) < self.host_count and not final):
            return None
        self.noted = True
        return (
            f"torchrun set OMP_NUM_THREADS={self.value} for each process on "
            f"{len(self.hosts)} of {self.host_count} host(s) (its banner, folded; "
            "set OMP_NUM_THREADS to choose)"
        )
