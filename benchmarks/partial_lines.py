"""``LineBuffer.feed`` on a line with no newline yet, fed in small pieces.

    python -m benchmarks.partial_lines [--rounds 5] [--against DIR]

A stream's unfinished line waits in its ``LineBuffer`` for its end, up to
``MAX_PARTIAL`` (4 MiB). Here 4 MiB with no newline is fed in one piece, in
4 KiB and in 100-byte pieces, and 64 KiB and 1 MiB in 1-byte pieces (a
progress printer writing a dot at a time reaches the controller in pieces that
small); each way is timed in a fresh process, then flushed. Shown: the median
time per MiB fed, and two ratios measured in the same run: 1-byte pieces over
1 MiB against over 64 KiB (1× when the cost is linear, up to 16× when quadratic),
and with ``--against DIR`` (another checkout, e.g. a worktree of main) that
checkout's time against this one's, rounds interleaved.

Not part of ``python -m benchmarks``: pure, no cluster. The numbers are quoted
at ``clusterlaunch.core.lines._grown``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

MIB = 1 << 20
CASES = {  # name: (piece, bytes fed)
    "one piece": (4 * MIB, 4 * MIB),
    "4 KiB pieces": (4096, 4 * MIB),
    "100-byte pieces": (100, 4 * MIB),
    "1-byte pieces, 64 KiB": (1, MIB // 16),
    "1-byte pieces, 1 MiB": (1, MIB),
}
CHILD = """
import json, sys, time
from clusterlaunch.core.lines import LineBuffer
times = {}
for name, (piece, total) in json.loads(sys.argv[1]).items():
    buffer, data = LineBuffer(live_cr=True), b"." * piece
    began = time.perf_counter()
    for _ in range(total // piece):
        buffer.feed(data)
    buffer.flush()
    times[name] = time.perf_counter() - began
print(json.dumps(times))
"""


def one_round(checkout: Path) -> dict[str, float]:
    """Seconds per case, measured in a fresh process importing ``checkout``'s code."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-c", CHILD, json.dumps(CASES)]  # -c: the folder it runs in first
    done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, check=True)
    return {name: float(seconds) for name, seconds in json.loads(done.stdout).items()}


def per_mib(rounds: list[dict[str, float]], name: str) -> float:
    """Median milliseconds per MiB fed of case ``name``."""
    return 1000 * statistics.median(r[name] for r in rounds) * MIB / CASES[name][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", metavar="DIR", help="also time this checkout's LineBuffer")
    args = parser.parse_args()
    checkouts = {"this": Path(__file__).resolve().parents[1]}
    if args.against:
        checkouts["against"] = Path(args.against).resolve()
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label in checkouts}
    for _ in range(args.rounds):
        for label, checkout in checkouts.items():  # interleaved: the machine's load alike
            rounds[label].append(one_round(checkout))
    for name in CASES:
        cells = [f"{label} {per_mib(rounds[label], name):9.2f} ms/MiB" for label in checkouts]
        if "against" in rounds:
            ratio = per_mib(rounds["against"], name) / per_mib(rounds["this"], name)
            cells.append(f"against/this {ratio:7.1f}×")
        print(f"{name:24} " + "   ".join(cells))
    for label in checkouts:
        growth = per_mib(rounds[label], "1-byte pieces, 1 MiB") / per_mib(
            rounds[label], "1-byte pieces, 64 KiB"
        )
        print(f"{label}: 1-byte pieces, per MiB, 1 MiB / 64 KiB: {growth:.2f}× (linear: 1×)")


if __name__ == "__main__":
    main()
