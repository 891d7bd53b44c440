"""Machine information and the stored results: results.json, results.md, the plot, the doc.

results.json keeps one entry per measurement (its rows, date, repeat count and
the load average before and after it), so ``--only NAME`` replaces just that
measurement's entry and the stored table stays complete.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks.core import MISS, PASS, Result, format_table
from benchmarks.core import summary_counts as counts_of
from benchmarks.env import REPO

SCHEMA = 1
DOC_BEGIN = "<!-- results:begin -->"
DOC_END = "<!-- results:end -->"


def now() -> str:
    """Local time, ISO 8601 with the offset."""
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def loadavg() -> list[float]:
    """1, 5 and 15 minute load averages, rounded."""
    return [round(value, 2) for value in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    """What the numbers depend on: CPU, memory, kernel, versions, the commit."""
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": _mem_gib(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "paramiko": _version("paramiko"),
        "openssh": ssh_version(),
        "pdsh": pdsh_version(),
        "commit": _git_commit(),
    }


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return None


def _git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "clusterlaunch"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" (clusterlaunch/ modified)" if dirty else "")


# -- storing ------------------------------------------------------------------------
def load(path: Path) -> dict[str, Any]:
    """The stored results, or an empty document."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"schema": SCHEMA, "measurements": []}
    if data.get("schema") != SCHEMA:
        return {"schema": SCHEMA, "measurements": []}
    return data


def combine(
    previous: Mapping[str, Any],
    fresh: Sequence[Mapping[str, Any]],
    order: Sequence[str],
    run_info: Mapping[str, Any],
) -> dict[str, Any]:
    """The new document: fresh entries replace the same measurements' old ones."""
    entries = order_entries(merge_results(previous.get("measurements", []), fresh), order)
    return {"schema": SCHEMA, **run_info, "measurements": entries}


def results_of(document: Mapping[str, Any]) -> list[Result]:
    """Every row of every measurement entry, in order."""
    return [
        Result.from_json(row)
        for entry in document.get("measurements", [])
        for row in entry.get("results", [])
    ]


def markdown(document: Mapping[str, Any], plot_name: str | None) -> str:
    """results.md: conditions, the table, the verdict count, errors, the plot."""
    machine = document.get("machine", {})
    results = results_of(document)
    counts = counts_of(results)
    lines = [
        f"Updated {document.get('updated', '?')} with `{document.get('command', '?')}`.",
        "",
        f"Machine: {machine.get('cores')} cores ({machine.get('cpu')}), "
        f"{machine.get('memory_gib')} GiB, Linux {machine.get('kernel')}; "
        f"Python {machine.get('python')}, torch {machine.get('torch')}, "
        f"paramiko {machine.get('paramiko')}; {machine.get('openssh')}; "
        f"{machine.get('pdsh')}; commit {machine.get('commit')}.",
        "",
        f"Interpreters: controller and torch jobs `{document.get('controller_python', '?')}`; "
        f"hosts of the exec measurements `{document.get('host_python', '?')}`. "
        f"Host sessions {'source' if document.get('host_rc') else 'skip'} ~/.bashrc.",
        "",
    ]
    if document.get("note"):
        lines += [f"Note: {document['note']}", ""]
    lines += [
        "| measurement | run at | repeat | load before (1/5/15 min) | load after | took |",
        "|---|---|---|---|---|---|",
    ]
    for entry in document.get("measurements", []):
        quick = " (quick)" if entry.get("quick") else ""
        lines.append(
            f"| {entry['name']} | {entry.get('date', '?')} | {entry.get('repeat')}{quick} | "
            f"{_load(entry.get('load_before'))} | {_load(entry.get('load_after'))} | "
            f"{entry.get('seconds', 0):.0f} s |"
        )
    lines += [
        "",
        format_table(results),
        "",
        f"{counts[PASS]} PASS, {counts[MISS]} MISS "
        f"({counts['info']} baseline or informative rows).",
    ]
    errors = [e for e in document.get("measurements", []) if e.get("error")]
    if errors:
        lines += ["", "Errors (these measurements produced no numbers):", ""]
        lines += [f"* {e['name']}: `{_one_line(e['error'])}`" for e in errors]
    reruns = [e for e in document.get("measurements", []) if e.get("rerun_error")]
    if reruns:
        lines += ["", "Failed re-runs (the rows above are from the last good run):", ""]
        lines += [
            f"* {e['name']} at {e.get('rerun_date')}: `{_one_line(e['rerun_error'])}`"
            for e in reruns
        ]
    if plot_name:
        lines += ["", f"![benchmark results]({plot_name})"]
    return "\n".join(lines) + "\n"


def _load(values: Sequence[float] | None) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "?"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300].replace("`", "'")


def update_doc(doc: Path, body: str) -> bool:
    """Replace the text between the result markers of ``doc``; False if it has none."""
    try:
        text = doc.read_text()
    except OSError:
        return False
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        return False
    doc.write_text(text[: start + len(DOC_BEGIN)] + "\n" + body + text[end:])
    return True


def merge_results(
    previous: Sequence[Mapping[str, Any]], fresh: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """Measurement entries of ``previous`` not re-run, then ``fresh`` (by ``name``).

    Each entry is one measurement's run (its rows, date and load), so a partial
    re-run (``--only``) replaces just what it measured, in the registry's order
    when the caller passes ``order``. A re-run that failed with no rows does not
    throw away the last good run: that entry stays, with the failure noted in it
    (``rerun_error``, ``rerun_date``).
    """
    kept = {entry["name"]: entry for entry in previous if entry.get("results")}
    fresh_names = {entry["name"] for entry in fresh}
    merged = [e for e in previous if e["name"] not in fresh_names]
    for entry in fresh:
        good = kept.get(entry["name"])
        if entry.get("error") and not entry.get("results") and good is not None:
            entry = {**good, "rerun_error": entry["error"], "rerun_date": entry.get("date")}
        merged.append(entry)
    return merged


def order_entries(
    entries: Sequence[Mapping[str, Any]], order: Sequence[str]
) -> list[Mapping[str, Any]]:
    """Sort measurement entries by their position in ``order`` (unknown ones last)."""
    rank = {name: index for index, name in enumerate(order)}
    return sorted(entries, key=lambda e: rank.get(e["name"], len(rank)))


def ssh_version() -> str:
    """``OpenSSH_9.2p1 ...`` (ssh -V writes to stderr)."""
    try:
        done = subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False)
    except OSError:
        return "not installed"
    return (done.stderr or done.stdout).strip()


def pdsh_version() -> str:
    """``pdsh-2.34 ...`` or ``not installed``."""
    if shutil.which("pdsh") is None:
        return "not installed"
    done = subprocess.run(["pdsh", "-V"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).splitlines()[0].strip()
