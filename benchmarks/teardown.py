"""Teardown: 8 hosts, one rank exits 1 while the others sleep.

Measured from the failing rank's own ``time.time()``, written right before it
exits, to the first moment the orphan detector finds no process of the job on
any host (torchrun, workers, agents, their shells). The controller's own exit
is recorded too, as an informative row.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from benchmarks.core import Result, Target
from benchmarks.env import Bench
from benchmarks.processes import BenchError, reap
from clusterlaunch.testing import find_processes

NAME = "teardown"
HOSTS = 8
POLL_S = 0.005
NEEDS = HOSTS
"""How many simulated hosts this measurement uses."""


def wait_for_file(path: Path, process: subprocess.Popen[bytes], timeout: float) -> float:
    """The float in ``path`` once it appears; fails if ``process`` ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return float(path.read_text())
        except FileNotFoundError:
            pass
        if process.returncode is not None:
            raise BenchError(f"clusterlaunch exited {process.returncode} before {path.name}")
        time.sleep(POLL_S)
    raise BenchError(f"{path.name} did not appear within {timeout:g} s")


def wait_gone(markers: list[str], timeout: float) -> float:
    """``time.time()`` at the end of the first scan that finds nothing (conservative)."""
    return wait_gone_each(markers, timeout)[None]


def wait_gone_each(markers: list[str], timeout: float) -> dict[str | None, float]:
    """When each marker's last process was gone, and (key None) when all were.

    Times are ``time.time()`` at the end of the first scan that found none, so
    they err late by at most one scan (a few ms).
    """
    deadline = time.monotonic() + timeout
    gone: dict[str | None, float] = {}
    while True:
        left = find_processes(markers)
        now = time.time()
        busy = {proc.marker for proc in left}
        for marker in markers:
            if marker not in busy:
                gone.setdefault(marker, now)
        if not left:
            gone[None] = now
            return gone
        if time.monotonic() > deadline:
            names = sorted({p.cmdline[:60] for p in left})
            raise BenchError(f"{len(left)} process(es) still running after {timeout:g} s: {names}")
        time.sleep(POLL_S)


def one_run(
    bench: Bench, round_dir: Path, profile_as: str | None = None
) -> tuple[float, float, float]:
    """Seconds after the failing exit until: the failing host was clean, every host
    was clean, and clusterlaunch returned."""
    ready = round_dir / "ready"
    ready.mkdir(parents=True)
    fail_file = round_dir / "failed_at"
    argv = bench.cl(
        "run",
        "--master-port", str(bench.master_port()),
        "--env", f"BENCH_READY_DIR={ready}",
        "--env", f"BENCH_FAIL_RANK={HOSTS - 1}",
        "--env", f"BENCH_FAIL_FILE={fail_file}",
        str(bench.hosts_file(HOSTS, torch=True)),
        "fail_or_sleep.py",
        profile_as=profile_as,
    )  # fmt: skip
    process = subprocess.Popen(
        argv,
        cwd=bench.workdir,
        env=bench.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ended: dict[str, float] = {}

    def wait_for_controller() -> None:
        ended["code"] = reap(process)
        ended["at"] = time.time()

    waiter = threading.Thread(target=wait_for_controller, daemon=True)
    waiter.start()
    try:
        failed_at = wait_for_file(fail_file, process, timeout=120)
        markers = bench.markers()
        gone = wait_gone_each(markers, timeout=30)
        waiter.join(timeout=60)
    finally:
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)  # not reaped yet: the PID is still its own
            waiter.join()
    code, exited_at = ended["code"], ended["at"]
    if code != 1:
        raise BenchError(f"clusterlaunch exited {code}, expected the failing rank's 1")
    failing_host = markers[HOSTS - 1]  # rank HOSTS-1 runs on the last host
    return gone[failing_host] - failed_at, gone[None] - failed_at, exited_at - failed_at


def run(bench: Bench) -> list[Result]:
    """Repeat the failing job; median time to nothing left must be ≤ 1 s."""
    gone = Result(
        f"{NAME}.gone",
        NAME,
        f"rank exits 1 → last process gone, {HOSTS} hosts",
        "s",
        targets=[Target("max", 1.0)],
    )
    exited = Result(
        f"{NAME}.controller_exit",
        NAME,
        "rank exits 1 → clusterlaunch returned",
        "s",
        role="info",
    )
    own = Result(
        f"{NAME}.failing_host",
        NAME,
        "rank exits 1 → its own host clean (torchrun + agent noticed)",
        "s",
        role="info",
    )
    for index in bench.rounds(NAME):
        own_s, gone_s, exited_s = one_run(bench, bench.tmp / f"teardown-{index + 1}")
        if index >= 0:
            gone.samples.append(gone_s)
            exited.samples.append(exited_s)
            own.samples.append(own_s)
    gone.problems += bench.assert_clean()
    if bench.profile_dir is not None:
        one_run(bench, bench.tmp / "teardown-profile", profile_as=NAME)
    return [gone, own, exited]
