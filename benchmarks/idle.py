"""Steady state: the controller's CPU per host per second while a job just runs.

``exec HOSTS -- sleep S`` against ``exec HOSTS -- sleep 0`` on 32 hosts, under
:mod:`benchmarks.selfusage`, for each SSH client: the difference of the
controller's own CPU over 32 × S host-seconds is what keeping a host's job
alive costs (keepalive round trips, heartbeats, the read loop's sweeps,
paramiko's per-connection thread). It bounds how many hosts one controller
process can hold for a long job: at 1 s of CPU per second its single GIL is
full.
"""

from __future__ import annotations

from benchmarks.core import Result
from benchmarks.cpu import CLIENTS, usage_of
from benchmarks.env import Bench

NAME = "idle"
HOSTS = 32
SECONDS = 8
NEEDS = HOSTS
"""How many simulated hosts this measurement uses."""


def run(bench: Bench) -> list[Result]:
    """Per client: (CPU of sleep S − CPU of sleep 0) / (hosts × S), in ms per host-second."""
    results = []
    for client in CLIENTS:
        result = Result(
            f"{NAME}.{client}",
            NAME,
            f"{client}: controller CPU per host per second of a running job ({HOSTS} hosts)",
            "ms",
            role="info",
        )
        for index in bench.rounds(f"{NAME} {client}"):
            quiet = usage_of(bench, client, HOSTS, ["sleep", "0"])
            busy = usage_of(bench, client, HOSTS, ["sleep", str(SECONDS)])
            if index >= 0:
                extra = busy["cpu_s"] - quiet["cpu_s"]
                result.samples.append(1000 * extra / (HOSTS * SECONDS))
                result.extra.setdefault("children_cpu_s", []).append(
                    round(busy["children_cpu_s"] - quiet["children_cpu_s"], 4)
                )
        result.problems += bench.assert_clean()
        results.append(result)
    return results


__all__ = ["NAME", "run"]
