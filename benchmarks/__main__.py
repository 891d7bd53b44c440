"""``python -m benchmarks``: run the benchmarks against a simulated cluster, print the table.

    python -m benchmarks                  # everything, 5 rounds each, results to docs/
    python -m benchmarks --quick          # 1 round, smaller throughput run: a smoke test
    python -m benchmarks --only fanout --repeat 9
    python -m benchmarks --only clients --client-sizes 1,8,32   # paramiko vs OpenSSH
    python -m benchmarks --profile /tmp/prof   # also one pyinstrument report per scenario

See docs/benchmarks.md for what each measurement does and how to read the table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import (
    clients,
    cpu,
    fanout,
    firstcommand,
    idle,
    libraries,
    overhead,
    report,
    scale,
    sigkill,
    teardown,
    throughput,
)
from benchmarks.core import MISS, Result, format_table, summary_counts
from benchmarks.env import REPO, Bench

_ORDER: tuple[ModuleType, ...] = (fanout, firstcommand, cpu, libraries, idle, throughput)
_ORDER += (teardown, sigkill, overhead, scale, clients)
MEASUREMENTS: dict[str, ModuleType] = {module.NAME: module for module in _ORDER}
DEFAULT_REPEAT = 5


def build_parser() -> argparse.ArgumentParser:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--repeat", type=int, help=f"recorded rounds per measurement (default {DEFAULT_REPEAT})"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run only these (repeatable or comma-separated): {', '.join(MEASUREMENTS)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 round (unless --repeat), 200k lines of throughput"
    )
    parser.add_argument(
        "--out",
        default=str(REPO / "docs" / "benchmarks"),
        help="directory for results.json, results.md and results.png "
        "(default docs/benchmarks; '' writes nothing)",
    )
    parser.add_argument(
        "--doc",
        default=str(REPO / "docs" / "benchmarks.md"),
        help="also copy the table between the result markers of this file ('' to skip)",
    )
    parser.add_argument("--profile", metavar="DIR", help="also write pyinstrument reports here")
    parser.add_argument(
        "--host-python",
        help="the hosts' interpreter for the exec measurements (default: this one); "
        "torch jobs always use this one",
    )
    parser.add_argument(
        "--host-rc",
        action="store_true",
        help="let the hosts' sessions source ~/.bashrc (default: skip it, see docs)",
    )
    parser.add_argument(
        "--client-sizes",
        default="",
        metavar="N,N,...",
        help="host counts for the clients measurement (default 1,8,32,64; --quick 1,8)",
    )
    parser.add_argument("--note", default="", help="free text stored with the results")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed, too")
    return parser


def selected(only: list[str]) -> list[str]:
    """Measurement names to run, in registry order."""
    if not only:
        return list(MEASUREMENTS)
    wanted = {name.strip() for item in only for name in item.split(",") if name.strip()}
    unknown = wanted - set(MEASUREMENTS)
    if unknown:
        raise SystemExit(
            f"unknown measurement(s) {sorted(unknown)}; choose from {list(MEASUREMENTS)}"
        )
    return [name for name in MEASUREMENTS if name in wanted]


def run_measurements(bench: Bench, names: list[str]) -> list[dict[str, Any]]:
    """Each measurement once, with its date and load; errors are recorded, not raised."""
    entries = []
    for name in names:
        bench.log(f"=== {name} ===")
        entry: dict[str, Any] = {
            "name": name,
            "date": report.now(),
            "repeat": bench.repeat,
            "quick": bench.quick,
            "load_before": report.loadavg(),
            "error": None,
            "results": [],
        }
        began = time.perf_counter()
        try:
            rows: list[Result] = MEASUREMENTS[name].run(bench)
            entry["results"] = [row.to_json() for row in rows]
        except Exception:  # one broken measurement must not lose the others
            entry["error"] = traceback.format_exc()
            bench.log(f"{name} failed:\n{entry['error']}")
            try:
                problems = bench.assert_clean(timeout=10.0)
            except Exception as exc:
                problems = [f"cleanup check failed: {exc}"]
            if problems:
                bench.log(f"after {name}: {problems}")
        entry["seconds"] = round(time.perf_counter() - began, 1)
        entry["load_after"] = report.loadavg()
        bench.log(f"{name}: {entry['seconds']} s, load {entry['load_after']}")
        entries.append(entry)
    return entries


def _leave(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP ends a run as Ctrl-C does: through ``with bench``, which takes the
    simulated hosts down (the default action left their sshd and a job's torchrun running)."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = build_parser().parse_args(argv)
    names = selected(args.only)
    repeat = args.repeat or (1 if args.quick else DEFAULT_REPEAT)
    if repeat < 1:
        raise SystemExit("--repeat must be at least 1")
    needs = max(MEASUREMENTS[name].NEEDS for name in names)
    profile_dir = Path(args.profile).resolve() if args.profile else None
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
    command = "python -m benchmarks" + (" " + shlex.join(argv or sys.argv[1:])).rstrip()
    load_before = report.loadavg()
    started = report.now()
    bench = Bench(
        needs,
        repeat,
        quick=args.quick,
        profile_dir=profile_dir,
        keep=args.keep,
        host_python=args.host_python,
        host_rc=args.host_rc,
        client_sizes=tuple(int(n) for n in args.client_sizes.split(",") if n.strip()),
    )
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _leave)
    with bench:
        entries = run_measurements(bench, names)
    run_info = {
        "updated": started,
        "command": command,
        "note": args.note,
        "host_python": bench.host_python,
        "host_rc": bench.host_rc,
        "controller_python": bench.python,
        "load_before": load_before,
        "load_after": report.loadavg(),
        "machine": report.machine_info(),
    }
    write_failed = False
    if args.out:  # first, so that nothing measured is lost to a display problem
        try:
            write_outputs(Path(args.out), Path(args.doc) if args.doc else None, entries, run_info)
        except Exception:
            traceback.print_exc()
            write_failed = True
    rows = report.results_of({"measurements": entries})
    print()
    print(format_table(rows))
    counts = summary_counts(rows)
    print(
        f"\n{counts['PASS']} PASS, {counts[MISS]} MISS; load average "
        f"{run_info['load_before']} before, {run_info['load_after']} after "
        f"({run_info['machine']['cores']} cores)"
    )
    errors = [e["name"] for e in entries if e["error"]]
    if errors:
        print(f"errors in: {', '.join(errors)} (tracebacks above)")
    if errors or write_failed:
        return 1
    return 1 if args.strict and counts[MISS] else 0


def write_outputs(
    out: Path, doc: Path | None, entries: list[dict[str, Any]], run_info: dict[str, Any]
) -> None:
    """Merge into results.json; rewrite results.md, results.png and the doc's table."""
    from benchmarks.plot import plot

    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    document = report.combine(report.load(json_path), entries, list(MEASUREMENTS), run_info)
    json_path.write_text(json.dumps(document, indent=1) + "\n")
    png = plot(
        report.results_of(document),
        out / "results.png",
        f"clusterlaunch benchmarks, {document['updated']}, "
        f"{document['machine']['cores']} cores, load {document['load_before']}",
    )
    body = report.markdown(document, png.name)
    (out / "results.md").write_text("# Benchmark results\n\n" + body)
    print(f"wrote {json_path}, {out / 'results.md'}, {png}")
    if doc is not None:
        relative = png.relative_to(doc.parent) if png.is_relative_to(doc.parent) else png
        if report.update_doc(doc, report.markdown(document, str(relative))):
            print(f"updated the results in {doc}")


if __name__ == "__main__":
    sys.exit(main())
