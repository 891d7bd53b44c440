"""Incremental line splitting and rank prefixes, on bytes.

Output is never decoded on its way through: ``\\n`` never occurs inside a
multi-byte UTF-8 sequence, so splitting bytes at ``\\n`` is safe, and invalid
UTF-8 passes through unchanged. A ``\\r`` (progress bars) stays inside its
line; on the console the prefix is repeated after it so each redraw keeps its
label.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

from clusterlaunch.core.limits import MAX_WORLD_SIZE, shown

MAX_PARTIAL = 4 << 20
"""A "line" longer than this without a newline is passed on in pieces (memory bound)."""

_BARE_CR = re.compile(rb"\r(?!\n)")
_RANK = re.compile(r"[0-9]{1,12}")
_COLORS = (b"36", b"33", b"32", b"35", b"34", b"31", b"96", b"93", b"92", b"95", b"94", b"91")
_RESET = b"\x1b[0m"


class LineBuffer:
    """Splits one byte stream into complete lines, keeping the unfinished tail."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, data: bytes) -> bytes:
        """The complete lines ``data`` finishes, as one block ending in ``\\n`` (or b"")."""
        if self._partial:
            data = self._partial + data
        cut = data.rfind(b"\n") + 1
        if cut == 0 and len(data) > MAX_PARTIAL:
            self._partial = b""
            return data + b"\n"
        self._partial = data[cut:]
        return data[:cut]

    def flush(self) -> bytes:
        """The unfinished tail as a final line (a newline added), or b""."""
        rest, self._partial = self._partial, b""
        return rest + b"\n" if rest else b""


def prefix_block(prefix: bytes, block: bytes) -> bytes:
    """Put ``prefix`` before every line of ``block`` (complete lines) and after bare ``\\r``."""
    if not block:
        return b""
    if b"\r" in block:
        # Before the last newline is cut off, so a final "\r\n" is not bare.
        repeated = b"\r" + prefix
        block = _BARE_CR.sub(lambda _: repeated, block)
    return prefix + block[:-1].replace(b"\n", b"\n" + prefix) + b"\n"


def split_lines(block: bytes) -> list[bytes]:
    """Lines of a block of complete lines, without their newlines."""
    return block[:-1].split(b"\n") if block else []


def parse_rank_filter(text: str, world_size: int | None = None) -> frozenset[int]:
    """``"0,4-7"`` → {0, 4, 5, 6, 7}; raises ValueError with a readable message.

    Ranges are checked against ``world_size`` (else the largest job there can
    be) before any set is built: ``0-99999999999`` ran out of memory.
    """
    last_rank = (MAX_WORLD_SIZE if world_size is None else world_size) - 1
    spans = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if not _RANK.fullmatch(low) or (dash and not _RANK.fullmatch(high)):
            raise ValueError(f"--ranks {shown(text)}: use ranks and ranges like 0,4-7")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"--ranks {shown(text)}: range {part} runs backwards")
        if last > last_rank:
            raise ValueError(f"--ranks {shown(text)}: the job has ranks 0-{last_rank} only")
        spans.append((first, last))
    ranks: set[int] = set()
    for first, last in _merged(spans):  # each rank added once, however the ranges overlap
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


class Prefixes:
    """Aligned, optionally coloured prefixes for every rank and host of a job."""

    def __init__(
        self, ranks: Iterable[tuple[int, str, int]], hosts: Iterable[str], color: bool
    ) -> None:
        rank_list = list(ranks)
        host_list = list(hosts)
        labels = {rank: f"[r{rank} {host}:{local}]" for rank, host, local in rank_list}
        host_labels = {host: f"[{host}]" for host in host_list}
        width = max((len(label) for label in [*labels.values(), *host_labels.values()]), default=0)
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
    padding = b" " * (width - len(label) + 1)
    text = label.encode()
    if color:
        text = b"\x1b[" + _COLORS[index % len(_COLORS)] + b"m" + text + _RESET
    return text + padding


class TailKeeper:
    """The last few lines of each stream, for the failure summary."""

    def __init__(self, keep: int = 20) -> None:
        self._keep = keep
        self._lines: dict[object, deque[bytes]] = {}

    def add(self, key: object, block: bytes) -> None:
        """Remember the lines of a block of complete lines under ``key``."""
        if block:
            lines = self._lines.setdefault(key, deque(maxlen=self._keep))
            # rsplit with a bound: only the last lines are ever split out.
            lines.extend(block[:-1].rsplit(b"\n", self._keep)[-self._keep :])

    def lines(self, key: object) -> list[str]:
        """Remembered lines of ``key``, decoded for display."""
        return [line.decode("utf-8", "replace") for line in self._lines.get(key, ())]
