"""Controller SIGKILL: how long the job outlives a ``kill -9`` of clusterlaunch.

8 hosts run a torchrun job whose ranks print ``up`` and sleep; once every rank
is up, the controller gets SIGKILL (no handler runs, nothing is sent to the
hosts). Only the agents can clean up: their stdin reaches EOF when the SSH
connections drop. Measured from the kill to the first moment the orphan
detector finds nothing on any host.

Two kinds of job, both with ``--grace 2``: ranks that die on SIGTERM, and
stubborn ranks that ignore it and must be SIGKILLed when the grace runs out.
The target is the worst run's time (``max``), not the median: a cleanup
guarantee is about every run.
"""

from __future__ import annotations

import subprocess
import time

from benchmarks.core import Result, Target
from benchmarks.env import Bench
from benchmarks.processes import BenchError, reap
from benchmarks.teardown import wait_gone

NAME = "sigkill"
HOSTS = 8
GRACE = 2.0
NEEDS = HOSTS
"""How many simulated hosts this measurement uses."""


def wait_until_up(process: subprocess.Popen[bytes], ranks: int, timeout: float) -> None:
    """Read the controller's stdout until ``ranks`` lines say ``up``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    up = 0
    while up < ranks:
        line = process.stdout.readline()
        if not line:
            raise BenchError(f"clusterlaunch ended after {up}/{ranks} ranks were up")
        if time.monotonic() > deadline:
            raise BenchError(f"only {up}/{ranks} ranks up after {timeout:g} s")
        up += line.rstrip().endswith(b" up")


def one_run(bench: Bench, stubborn: bool) -> float:
    """Seconds from SIGKILL of the controller to nothing left on any host."""
    argv = bench.cl(
        "run",
        "--grace", f"{GRACE:g}",
        "--master-port", str(bench.master_port()),
        "--env", f"BENCH_STUBBORN={int(stubborn)}",
        str(bench.hosts_file(HOSTS, torch=True)),
        "sleep_ranks.py",
    )  # fmt: skip
    process = subprocess.Popen(
        argv,
        cwd=bench.workdir,
        env=bench.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_up(process, HOSTS, timeout=120)
        killed_at = time.time()
        process.kill()
        code = reap(process)
        if code != -9:
            raise BenchError(f"clusterlaunch ended with {code} before the SIGKILL")
        return wait_gone(bench.markers(), timeout=GRACE + 30) - killed_at
    finally:
        if process.returncode is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def run(bench: Bench) -> list[Result]:
    """Both kinds of job, alternating, ``repeat`` times each."""
    limit = Target("max", GRACE + 2.0, stat="max")
    results = {
        False: Result(
            f"{NAME}.cooperative",
            NAME,
            f"kill -9 controller → last process gone, {HOSTS} hosts, ranks die on SIGTERM",
            "s",
            targets=[limit],
        ),
        True: Result(
            f"{NAME}.stubborn",
            NAME,
            f"same, ranks ignore SIGTERM (SIGKILL after --grace {GRACE:g})",
            "s",
            targets=[limit],
        ),
    }
    for index in bench.rounds(NAME, warmup=0):
        for stubborn, result in results.items():
            seconds = one_run(bench, stubborn)
            if index >= 0:
                result.samples.append(seconds)
    leftovers = bench.assert_clean()
    for result in results.values():
        result.problems += leftovers
    return list(results.values())
