"""Controller CPU per host with the srun transport, against a real Slurm (root, netns).

    python -m benchmarks.srun_cost [--nodes 8] [--rounds 3]

``salloc -N N clusterlaunch exec slurm -- true`` on 1 and N nodes of a real
Slurm (munged, slurmctld, one slurmd per network-namespace host: the suite's
own ``tests/slurm/real.py``), the controller under :mod:`benchmarks.selfusage`:
its own CPU, its children's (one ``srun`` per node) and its peak threads and
fds. Per host: own CPU / N; marginal: (own CPU at N − at 1) / (N − 1), and
the same for the srun children.

Not part of ``python -m benchmarks``: the simulated cluster there is sshd on
loopback, and Debian's slurmd runs one node per machine unless each has a
network and UTS namespace of its own, which needs root. The numbers are in
docs/benchmarks.md (controller cost per host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.netns import NetnsCluster, netns_unavailable_reason
from tests.slurm.real import SlurmCluster, slurm_unavailable_reason


def measure(slurm: SlurmCluster, nodes: int, out: Path) -> dict[str, float]:
    """One ``exec true`` on ``nodes`` nodes of a fresh allocation: selfusage's record, wall."""
    out.unlink(missing_ok=True)
    python = sys.executable
    argv = ["salloc", f"-N{nodes}", "--quiet", python, "-m", "benchmarks.selfusage", str(out)]
    argv += ["exec", "--python", python, "slurm", "--", "true"]
    began = time.perf_counter()
    done = subprocess.run(argv, env=slurm.env(), capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    usage: dict[str, float] = json.loads(out.read_text())
    usage["wall_s"] = wall
    return usage


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.srun_cost")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = netns_unavailable_reason() or slurm_unavailable_reason()
    if reason is not None:
        print(f"cannot run a real Slurm here: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="clusterlaunch-srun-cost-") as tmp:
        base = Path(tmp)
        net = NetnsCluster(args.nodes, base / "net").start()
        try:
            slurm = SlurmCluster(net, base / "slurm")
            slurm.start()
            try:
                records: dict[int, list[dict[str, float]]] = {1: [], args.nodes: []}
                for index in range(-1, args.rounds):  # round -1: warm-up, not recorded
                    for nodes in records:
                        usage = measure(slurm, nodes, base / "usage.json")
                        if index >= 0:
                            records[nodes].append(usage)
            finally:
                strays = slurm.stop()
        finally:
            killed = net.stop()
    report(records, args.nodes)
    if strays or killed:
        print(f"left on the nodes (killed): {strays + [str(p) for p in killed]}")
        return 1
    return 0


def report(records: dict[int, list[dict[str, float]]], nodes: int) -> None:
    """Medians, in ms."""

    def median(count: int, key: str) -> float:
        return statistics.median(r[key] for r in records[count]) * 1000

    own_one, child_one = median(1, "cpu_s"), median(1, "children_cpu_s")
    own, child = median(nodes, "cpu_s"), median(nodes, "children_cpu_s")
    print(f"rounds: {len(records[1])} (medians); nodes: 1 and {nodes}")
    print(f"controller CPU, 1 node: {own_one:.0f} ms; srun children: {child_one:.0f} ms")
    print(f"controller CPU / host, {nodes} nodes: {own / nodes:.1f} ms")
    print(f"marginal controller CPU / host: {(own - own_one) / (nodes - 1):.1f} ms")
    print(f"marginal srun children CPU / host: {(child - child_one) / (nodes - 1):.1f} ms")
    for key in ("wall_s", "peak_threads", "peak_fds", "peak_rss_kib"):
        values = [statistics.median(r[key] for r in records[n]) for n in (1, nodes)]
        print(f"{key}: 1 node {values[0]:.3g}, {nodes} nodes {values[1]:.3g}")


if __name__ == "__main__":
    sys.exit(main())
