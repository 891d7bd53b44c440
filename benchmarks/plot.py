"""The results as one PNG: a panel per measurement (and unit), medians with min–max bars."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from benchmarks.core import Result

COLORS = {"clusterlaunch": "#1f77b4", "baseline": "#9a9a9a", "info": "#c7d9ea"}


def panels(results: Sequence[Result]) -> list[tuple[str, str, list[Result]]]:
    """(group, unit, rows) for each panel, in the order the groups appear."""
    found: dict[tuple[str, str], list[Result]] = {}
    for result in results:
        if result.samples:
            found.setdefault((result.group, result.unit), []).append(result)
    return [(group, unit, rows) for (group, unit), rows in found.items()]


def plot(results: Sequence[Result], path: Path, title: str) -> Path:
    """Write the figure to ``path`` (Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = panels(results)
    columns = 2
    rows = max(1, math.ceil(len(chosen) / columns))
    heights = [max(1.6, 0.45 * len(panel[2]) + 0.9) for panel in chosen]
    fig_height = sum(max(heights[i : i + columns]) for i in range(0, len(heights), columns))
    fig, axes = plt.subplots(rows, columns, figsize=(15, fig_height + 1.0), squeeze=False)
    for axis, (group, unit, rows_) in zip(axes.flat, chosen, strict=False):
        scale, shown_unit = (1e6, f"M{unit}") if unit.endswith("/s") else (1.0, unit)
        labels = [r.label for r in rows_]
        medians = [r.stat("median") / scale for r in rows_]
        lows = [m - r.stat("min") / scale for m, r in zip(medians, rows_, strict=True)]
        highs = [r.stat("max") / scale - m for m, r in zip(medians, rows_, strict=True)]
        positions = list(range(len(rows_)))[::-1]
        axis.barh(
            positions,
            medians,
            xerr=[lows, highs],
            color=[COLORS.get(r.role, "#1f77b4") for r in rows_],
            capsize=3,
        )
        axis.set_yticks(positions, labels, fontsize=8)
        axis.set_title(f"{group} ({shown_unit})", fontsize=10, loc="left")
        axis.tick_params(axis="x", labelsize=8)
        for pos, row in zip(positions, rows_, strict=True):
            for target in row.targets:
                if target.ref is None:  # absolute limits are drawn; ratios are in the table
                    limit = target.limit / scale
                    axis.plot([limit, limit], [pos - 0.4, pos + 0.4], "r--", lw=1)
        axis.grid(axis="x", alpha=0.3)
    for axis in list(axes.flat)[len(chosen) :]:
        axis.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.text(
        0.01,
        0.005,
        "bars: median; whiskers: min–max; dark blue: clusterlaunch, grey: baseline, "
        "light: informative; red dashes: absolute target",
        fontsize=8,
    )
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
