"""``clusterlaunch doctor``'s output: host tables, pair matrix, bandwidth, verdicts (pure)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from clusterlaunch.core.cells import columns, pad
from clusterlaunch.core.doctor import Finding, HostCheck, gpu_model, pair_matrix, version_of
from clusterlaunch.core.rankdisk import size_text


def _or_none(value: Any) -> str:
    if isinstance(value, dict) and "error" in value:
        return f"error: {value['error']}"
    return str(value) if value not in (None, "", []) else "none"


def host_rows(check: HostCheck) -> list[tuple[str, str]]:
    """The label/value rows of one host's table."""
    facts = check.facts or {}
    gpus = facts.get("gpus") or []
    if facts.get("gpu_tool") is None:
        gpu_text = "none (no nvidia-smi: a CPU host)"
    else:
        used = sum(g.get("memory_used_mib") or 0 for g in gpus)
        gpu_text = f"{len(gpus)} x {gpu_model(facts) or '?'}, {used} MiB in use"
    env = facts.get("ifname_env") or {}
    ifnames = ", ".join(f"{k}={v}" if v else f"{k} unset" for k, v in sorted(env.items()))
    route = facts.get("route_error") or (
        f"via {facts.get('route_interface') or '?'}, source {facts.get('route_source')}"
    )
    skew = "?" if check.skew is None else f"{check.skew[0]:+.3f} s (±{check.skew[1]:.3f})"
    free = facts.get("disk_free_bytes")
    disk = f"{free / 2**30:.1f} GiB in {facts.get('workdir')}" if free is not None else "?"
    ranks = facts.get("rank_files") or {}
    rank_disk = "?" if not isinstance(ranks.get("free"), int) else size_text(ranks["free"])
    resolved = ", ".join(facts.get("resolves_to") or []) or facts.get("resolve_error", "?")
    return [
        ("python", f"{facts.get('python')} ({facts.get('executable')})"),
        ("torch", _or_none(facts.get("torch"))),
        ("cuda runtime", _or_none(facts.get("cuda"))),
        ("nccl", _or_none(facts.get("nccl"))),
        ("driver", _or_none(version_of(facts, "driver"))),
        ("gpus", gpu_text),
        ("own name", f"{facts.get('hostname')} -> {resolved}"),
        ("to master", route),
        ("ifname env", ifnames),
        ("clock skew", skew),
        ("free disk", disk),
        ("rank files", f"{rank_disk} free in {ranks.get('folder', '?')}"),
    ]


def matrix_text(checks: Sequence[HostCheck]) -> str:
    """Who reached whose ephemeral port: row dials column."""
    matrix = pair_matrix(checks)
    names = [check.host for check in checks]
    width = max(columns(name) for name in [*names, "from \\ to"]) + 2
    lines = ["all pairs (row connects to column's ephemeral port):"]
    lines.append("from \\ to".ljust(width) + "".join(pad(name, width) for name in names))
    for source in names:
        cells = []
        for target in names:
            value = matrix[source][target]
            cells.append("-" if source == target else {True: "ok", False: "FAIL", None: "?"}[value])
        lines.append(pad(source, width) + "".join(cell.ljust(width) for cell in cells))
    return "\n".join(line.rstrip() for line in lines)


def throughput_text(throughput: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    lines = ["TCP throughput, MB/s (row sends to column):"]
    names = sorted({*throughput, *(d for row in throughput.values() for d in row)})
    width = max(columns(name) for name in [*names, "from \\ to"]) + 2
    lines.append("from \\ to".ljust(width) + "".join(pad(name, width) for name in names))
    for source in names:
        row = throughput.get(source, {})
        cells = []
        for target in names:
            cell = row.get(target)
            text = "-" if cell is None else str(cell.get("mbps", "FAIL"))
            cells.append(text.ljust(width))
        lines.append(pad(source, width) + "".join(cells))
    return "\n".join(line.rstrip() for line in lines)


def all_reduce_text(bench: Mapping[str, Any]) -> str:
    """nccl-tests' columns: size, time, algbw, busbw."""
    lines = [
        f"all_reduce over {bench['ranks']} rank(s), backend {bench['backend']}:",
        f"{'size (B)':>12} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}",
    ]
    for row in bench["rows"]:
        lines.append(
            f"{row['bytes']:>12} {row['seconds'] * 1e6:>12.1f} "
            f"{row['algbw_gbps']:>13.4f} {row['busbw_gbps']:>13.4f}"
        )
    return "\n".join(lines)


def doctor_text(
    checks: Sequence[HostCheck],
    findings: Sequence[Finding],
    throughput: Mapping[str, Any] | None = None,
    bench: Mapping[str, Any] | None = None,
) -> str:
    """The whole report: host tables, the matrix, bandwidth, then one line per finding."""
    blocks = []
    for check in checks:
        if check.facts is None:
            blocks.append(f"{check.host}: no report")
            continue
        rows = host_rows(check)
        width = max(len(label) for label, _ in rows) + 2
        lines = [f"{check.host} (peers reach it at {', '.join(check.reached_at)})"]
        lines += [f"  {label.ljust(width)}{value}" for label, value in rows]
        blocks.append("\n".join(lines))
    blocks.append(matrix_text(checks))
    if throughput:
        blocks.append(throughput_text(throughput))
    if bench:
        detail = bench.get("skipped") or bench.get("error")
        blocks.append(all_reduce_text(bench) if bench.get("rows") else f"all_reduce: {detail}")
    blocks.append("\n".join([f.line() for f in findings] + [summary_line(checks, findings)]))
    return "\n\n".join(blocks)


def summary_line(checks: Sequence[HostCheck], findings: Sequence[Finding]) -> str:
    errors = sum(f.level == "error" for f in findings)
    warnings = len(findings) - errors
    if not findings:
        return f"doctor: no problems found on {len(checks)} host(s)"
    return f"doctor: {errors} error(s), {warnings} warning(s) on {len(checks)} host(s)"


def doctor_json(
    checks: Sequence[HostCheck],
    findings: Sequence[Finding],
    throughput: Mapping[str, Any] | None = None,
    bench: Mapping[str, Any] | None = None,
) -> str:
    """Every figure, as one JSON object."""
    document: dict[str, Any] = {
        "hosts": {
            check.host: {
                "reached_at": list(check.reached_at),
                "facts": check.facts,
                "problem": check.problem,
                "clock_skew_s": None if check.skew is None else check.skew[0],
                "clock_uncertainty_s": None if check.skew is None else check.skew[1],
            }
            for check in checks
        },
        "pairs": {check.host: dict(check.pairs or {}) for check in checks},
        "matrix": pair_matrix(checks),
        "findings": [{"level": f.level, "where": f.where, "text": f.text} for f in findings],
        "errors": sum(f.level == "error" for f in findings),
    }
    if throughput is not None:
        document["throughput"] = throughput
    if bench is not None:
        document["all_reduce"] = bench
    return json.dumps(document, indent=2, sort_keys=True)
