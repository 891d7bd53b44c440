"""``--ranks``: which global ranks the console shows, from ``"0,4-7"`` (pure)."""

from __future__ import annotations

import re

from clusterlaunch.core.limits import MAX_WORLD_SIZE, shown

_RANK = re.compile(r"[0-9]{1,12}")


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
