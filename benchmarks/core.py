"""Pure helpers of the benchmark harness: results, statistics, targets, the table.

Nothing here starts a process or touches the network, so it is unit-tested
(tests/unit/test_benchmarks_smoke.py). A measurement module produces
:class:`Result` objects; :func:`evaluate` judges them against their targets and
:func:`format_table` renders them as a Markdown table (also what the console shows).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
MISS = "MISS"
INFO = ""
"""Verdict of a row without a target (a baseline or an informative number)."""
PAIRED = "paired_delta_max"
"""The target kind judged on the rounds' paired differences (see :class:`Target`)."""

STATS = ("min", "median", "max")


@dataclass(frozen=True)
class Target:
    """What a result must achieve, judged on one statistic of its samples.

    ``kind``:

    * ``"max"``: ``stat <= limit`` (an absolute bound, in the result's unit);
    * ``"min"``: ``stat >= limit``;
    * ``"ratio_max"`` / ``"ratio_min"``: ``stat / ref.stat`` is at most / at least
      ``limit`` (``ref`` is the key of another result measured in the same run);
    * ``"delta_max"``: ``stat - ref.stat <= limit`` (an added cost, in the unit);
    * ``"paired_delta_max"``: the median of the rounds' differences, ``samples[i] -
      ref.samples[i]``, is at most ``limit``: for two ways measured back to back in
      each round, where the job's own spread is larger than the difference.
    """

    kind: str
    limit: float
    ref: str | None = None
    ref_label: str = ""
    stat: str = "median"

    def __post_init__(self) -> None:
        if self.kind not in ("max", "min", "ratio_max", "ratio_min", "delta_max", PAIRED):
            raise ValueError(f"unknown target kind {self.kind!r}")
        if self.kind.startswith(("ratio", "delta", "paired")) and self.ref is None:
            raise ValueError(f"a {self.kind} target needs ref")
        if self.stat not in STATS:
            raise ValueError(f"unknown statistic {self.stat!r}")

    def describe(self, unit: str) -> str:
        """``≤ 0.5× pdsh`` and the like, for the table."""
        stat = "" if self.stat == "median" else f"{self.stat} "
        ref = self.ref_label or self.ref or ""
        if self.kind == "max":
            return f"{stat}≤ {format_value(self.limit, unit)}"
        if self.kind == "min":
            return f"{stat}≥ {format_value(self.limit, unit)}"
        if self.kind == "ratio_max":
            return f"{stat}≤ {self.limit:g}× {ref}"
        if self.kind == "ratio_min":
            return f"{stat}≥ {self.limit:g}× {ref}"
        paired = ", paired" if self.kind == PAIRED else ""
        return f"{stat}≤ {ref} + {format_value(self.limit, unit)}{paired}"


@dataclass
class Result:
    """One row of the table: repeated samples of one quantity."""

    key: str
    """Unique within a run, e.g. ``fanout.clusterlaunch.32``; targets refer to it."""
    group: str
    """The measurement (module) that produced it."""
    label: str
    unit: str
    samples: list[float] = field(default_factory=list)
    higher_is_better: bool = False
    baseline: str | None = None
    """Key of the result the ratio column compares with (median / median)."""
    targets: list[Target] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Correctness failures (lost lines, leftovers, bad exit codes): any means MISS."""
    role: str = "clusterlaunch"
    """``clusterlaunch``, ``baseline`` or ``info`` (colours the plot)."""
    extra: dict[str, Any] = field(default_factory=dict)

    def stat(self, name: str) -> float:
        """``min``, ``median`` or ``max`` of the samples (NaN without samples)."""
        return summarize(self.samples)[name]

    def to_json(self) -> dict[str, Any]:
        """Everything, plus the statistics, as plain JSON data."""
        data = asdict(self)
        data["stats"] = summarize(self.samples)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Result:
        """Inverse of :meth:`to_json` (the statistics are recomputed)."""
        fields = {k: v for k, v in data.items() if k not in ("stats", "targets")}
        targets = [Target(**t) for t in data.get("targets", [])]
        return cls(**fields, targets=targets)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    """min, median and max (NaN for no samples) and the count."""
    if not samples:
        nan = float("nan")
        return {"min": nan, "median": nan, "max": nan, "n": 0}
    return {
        "min": min(samples),
        "median": statistics.median(samples),
        "max": max(samples),
        "n": len(samples),
    }


@dataclass(frozen=True)
class Verdict:
    """How one target went: PASS/MISS and the achieved value, in the target's terms."""

    target: Target
    ok: bool | None
    """None when it cannot be judged (no samples, or the reference is missing)."""
    achieved: str


def judge(target: Target, result: Result, results: Mapping[str, Result]) -> Verdict:
    """Judge ``target`` of ``result``; ``results`` holds the references by key."""
    value = result.stat(target.stat)
    if target.ref is None:
        if math.isnan(value):
            return Verdict(target, None, "no data")
        ok = value <= target.limit if target.kind == "max" else value >= target.limit
        return Verdict(target, ok, format_value(value, result.unit))
    ref = results.get(target.ref)
    if ref is None:
        return Verdict(target, None, f"no {target.ref}")
    ref_value = ref.stat(target.stat)
    if math.isnan(value) or math.isnan(ref_value) or ref_value == 0:
        return Verdict(target, None, "no data")
    if target.kind == "delta_max":
        delta = value - ref_value
        return Verdict(target, delta <= target.limit, _signed(delta, result.unit))
    if target.kind == PAIRED:
        if len(result.samples) != len(ref.samples):
            return Verdict(target, None, "unpaired samples")
        delta = statistics.median(a - b for a, b in zip(result.samples, ref.samples, strict=True))
        of_medians = _signed(value - ref_value, result.unit)
        achieved = f"{_signed(delta, result.unit)} (medians: {of_medians})"
        return Verdict(target, delta <= target.limit, achieved)
    ratio = value / ref_value
    ok = ratio <= target.limit if target.kind == "ratio_max" else ratio >= target.limit
    return Verdict(target, ok, f"{format_ratio(ratio)}")


def _signed(delta: float, unit: str) -> str:
    return f"{'+' if delta >= 0 else '-'}{format_value(abs(delta), unit)}"


def evaluate(result: Result, results: Mapping[str, Result]) -> tuple[str, list[Verdict]]:
    """The row's verdict: PASS, MISS, or INFO (no targets and no problems)."""
    verdicts = [judge(t, result, results) for t in result.targets]
    if result.problems:
        return MISS, verdicts
    if not verdicts:
        return INFO, verdicts
    if all(v.ok for v in verdicts):
        return PASS, verdicts
    return MISS, verdicts


def ratio_to_baseline(result: Result, results: Mapping[str, Result]) -> float | None:
    """median / the baseline's median, or None without a baseline."""
    if result.baseline is None or result.baseline not in results:
        return None
    ref = results[result.baseline].stat("median")
    value = result.stat("median")
    if math.isnan(ref) or math.isnan(value) or ref == 0:
        return None
    return value / ref


def format_value(value: float, unit: str) -> str:
    """A number with its unit, 3 significant digits; rates get k/M."""
    if math.isnan(value):
        return "–"
    if math.isinf(value):
        return f"{value} {unit}"
    if unit.endswith("/s") and abs(value) >= 1e3:
        scaled, suffix = (value / 1e6, "M") if abs(value) >= 1e6 else (value / 1e3, "k")
        return f"{_sig3(scaled)} {suffix}{unit}"
    return f"{_sig3(value)} {unit}"


def format_ratio(ratio: float) -> str:
    """``0.42×``."""
    return f"{_sig3(ratio)}×"


def _sig3(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return str(value)
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


TABLE_HEADER = ("measurement", "n", "min", "median", "max", "ratio", "target", "result")


def table_rows(results: Sequence[Result]) -> list[tuple[str, ...]]:
    """One tuple of cells per result, in :data:`TABLE_HEADER` order."""
    by_key = {r.key: r for r in results}
    rows: list[tuple[str, ...]] = []
    for result in results:
        verdict, verdicts = evaluate(result, by_key)
        stats = summarize(result.samples)
        ratio = ratio_to_baseline(result, by_key)
        ratio_text = ""
        if ratio is not None:
            base = by_key[result.baseline].label if result.baseline else ""
            ratio_text = f"{format_ratio(ratio)} {_short(base)}"
        target_text = "; ".join(f"{v.target.describe(result.unit)}: {v.achieved}" for v in verdicts)
        if result.problems:
            target_text = "; ".join([*([target_text] if target_text else []), *result.problems])
        rows.append(
            (
                f"{result.group}: {result.label}",
                str(stats["n"]),
                format_value(stats["min"], result.unit),
                format_value(stats["median"], result.unit),
                format_value(stats["max"], result.unit),
                ratio_text,
                target_text,
                verdict,
            )
        )
    return rows


def _short(label: str) -> str:
    return f"(vs {label})" if label else ""


def format_table(results: Sequence[Result]) -> str:
    """A Markdown table of ``results`` (aligned, so it also reads well on a console)."""
    rows = [TABLE_HEADER, *table_rows(results)]
    widths = [max(len(_md(row[i])) for row in rows) for i in range(len(TABLE_HEADER))]
    lines = []
    for index, row in enumerate(rows):
        cells = [_md(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _md(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def summary_counts(results: Iterable[Result]) -> dict[str, int]:
    """How many rows passed, missed, and are informative."""
    listed = list(results)
    by_key = {r.key: r for r in listed}
    counts = {PASS: 0, MISS: 0, "info": 0}
    for result in listed:
        verdict, _ = evaluate(result, by_key)
        counts[verdict or "info"] += 1
    return counts


def rotate(items: Sequence[Any], by: int) -> list[Any]:
    """``items`` started at position ``by`` (mod len): alternates which variant runs first."""
    if not items:
        return []
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]
