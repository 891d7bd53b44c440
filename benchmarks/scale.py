"""Scale: ``clusterlaunch exec`` of a short command on 256 hosts.

It must complete (exit 0, one output line from every host), leave nothing
running on any host, and the controller's peak RSS must stay under 150 MB.
The RSS is the controller process's own peak (VmHWM of its memory after exec,
polled every 5 ms from /proc), so no other process is counted: not the harness
either, whose own peak wait4's ``ru_maxrss`` would carry over into the child.
MB here means MiB.
"""

from __future__ import annotations

import re
import subprocess

from benchmarks.core import Result, Target
from benchmarks.env import Bench
from benchmarks.processes import BenchError

NAME = "scale"
HOSTS = 256
ROUNDS = 3
"""At most this many recorded rounds: each is ~10 s of 256 sessions on a 2-core machine."""
LINE = re.compile(rb"^\[(node\d+)\] +[0-9a-f]{12}-(node\d+)$")
NEEDS = HOSTS
"""How many simulated hosts this measurement uses."""


def check_output(stdout: bytes, names: list[str]) -> list[str]:
    """Problems unless every host printed its own marker exactly once."""
    seen: list[bytes] = []
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match is None or match[1] != match[2]:
            return [f"unexpected output line {line[:80]!r}"]
        seen.append(match[1])
    if sorted(seen) != sorted(n.encode() for n in names):
        return [f"{len(seen)} lines from {len(set(seen))} of {len(names)} hosts"]
    return []


def run(bench: Bench) -> list[Result]:
    """Repeat the 64-host exec; record its wall time and peak RSS."""
    names = bench.names(HOSTS)
    rss = Result(
        f"{NAME}.rss",
        NAME,
        f"controller peak RSS, exec on {HOSTS} hosts",
        "MB",
        targets=[Target("max", 150.0, stat="max")],
    )
    wall = Result(
        f"{NAME}.wall",
        NAME,
        f"clusterlaunch exec, {HOSTS} hosts (completes)",
        "s",
        role="info",
    )
    argv = bench.cl(
        "exec", str(bench.hosts_file(HOSTS)), "--", "sh", "-c", "echo $CLUSTERLAUNCH_SIM_HOST"
    )
    for index in bench.rounds(NAME):
        if index >= ROUNDS:
            break
        done = bench.run(argv, stdout=subprocess.PIPE)
        if done.returncode != 0:
            raise BenchError(
                f"exec on {HOSTS} hosts exited {done.returncode}: {done.stderr[-800:]!r}"
            )
        wall.problems += check_output(done.stdout, names)
        wall.problems += bench.assert_clean(timeout=5.0)
        if done.peak_rss_kib == 0:
            wall.problems.append("the controller's peak RSS could not be read")
        if index >= 0:
            wall.samples.append(done.seconds)
            rss.samples.append(done.peak_rss_kib / 1024)
            wall.extra.setdefault("local_cpu_s", []).append(round(done.cpu_s, 4))
    wall.problems = sorted(set(wall.problems))
    rss.problems += wall.problems
    if bench.profile_dir is not None:
        bench.run(bench.cl("exec", str(bench.hosts_file(HOSTS)), "--", "true", profile_as=NAME))
    return [rss, wall]
