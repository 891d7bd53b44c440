"""Controller CPU per host: ``clusterlaunch exec HOSTS -- true`` on 1, 32 and 256 hosts.

For each SSH client (paramiko, in process; openssh, one ssh master per host)
the controller runs under :mod:`benchmarks.selfusage`, which records the
process's own CPU (user + system, every thread, no child), its children's CPU
(the ssh clients) and its peak threads, open fds and RSS. Two per-host figures:

* **per host**: own CPU / hosts, start-up included (how the issue counted it);
* **marginal**: (own CPU at N − own CPU at 1 host) / (N − 1), the cost each
  further host adds, which decides how far one controller scales. Each round
  at N hosts is paired with a 1-host run just before it, and the marginal
  cost is taken per pair: the difference of two medians taken minutes apart
  moved with the machine (32 hosts: 4.76–7.98 ms for paramiko over three
  runs of the same code), enough to decide the 256-against-32 target.

The 256-host size runs fewer rounds (``BIG_ROUNDS``): on a 2-core machine each
one is ~10 s of 256 sshd sessions and agents.
"""

from __future__ import annotations

import json

from benchmarks.core import Result, Target
from benchmarks.env import Bench
from benchmarks.processes import BenchError

NAME = "cpu"
CLIENTS = ("paramiko", "openssh")
SIZES = (1, 32, 256)
BIG = 256
BIG_ROUNDS = 3
NEEDS = max(SIZES)
"""How many simulated hosts this measurement uses."""


def measure(bench: Bench, client: str, count: int) -> dict[str, float]:
    """One ``exec true`` on ``count`` hosts with ``client``: its selfusage record and wall."""
    return usage_of(bench, client, count, ["true"])


def usage_of(bench: Bench, client: str, count: int, command: list[str]) -> dict[str, float]:
    """``exec COMMAND`` on ``count`` hosts with ``client``: its selfusage record and wall."""
    out = bench.tmp / f"usage-{client}-{count}.json"
    out.unlink(missing_ok=True)
    argv = [
        bench.python, "-m", "benchmarks.selfusage", str(out),
        "exec", "--ssh-config", str(bench.ssh_config), "--ssh-client", client,
        str(bench.hosts_file(count)), "--", *command,
    ]  # fmt: skip
    done = bench.run(argv).check()
    try:
        usage: dict[str, float] = json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"no usage record from {client} on {count} hosts: {exc}") from None
    usage["wall_s"] = done.seconds
    return usage


def run(bench: Bench) -> list[Result]:
    """Own CPU per host and marginal CPU per host, per client and size."""
    results: list[Result] = []
    for client in CLIENTS:
        records: dict[int, list[dict[str, float]]] = {}
        paired: dict[int, list[dict[str, float]]] = {}  # the 1-host run before each round
        for count in SIZES:
            rounds = min(bench.repeat, BIG_ROUNDS) if count >= BIG else bench.repeat
            records[count], paired[count] = [], []
            bench.log(f"cpu: {client}, {count} host(s), {rounds} round(s) + warm-up")
            for index in range(-1, rounds):
                one = measure(bench, client, 1) if count > 1 else None
                usage = measure(bench, client, count)
                if index >= 0:
                    records[count].append(usage)
                    if one is not None:
                        paired[count].append(one)
            leftovers = bench.assert_clean()
            if leftovers:
                raise BenchError(f"{client} on {count} hosts left {leftovers}")
        results += _results(client, records, paired)
    return results


def _results(
    client: str,
    records: dict[int, list[dict[str, float]]],
    paired: dict[int, list[dict[str, float]]],
) -> list[Result]:
    rows = [
        Result(
            f"{NAME}.{client}.fixed",
            NAME,
            f"{client}: controller CPU, exec on 1 host (start-up included)",
            "ms",
            samples=[1000 * r["cpu_s"] for r in records[1]],
            role="info",
        )
    ]
    for count in SIZES[1:]:
        per_host = Result(
            f"{NAME}.{client}.{count}",
            NAME,
            f"{client}: controller CPU / host, exec on {count} hosts",
            "ms",
            samples=[1000 * r["cpu_s"] / count for r in records[count]],
        )
        marginal = Result(
            f"{NAME}.{client}.marginal.{count}",
            NAME,
            f"{client}: marginal controller CPU / host, 1 → {count} hosts",
            "ms",
            samples=[
                1000 * (r["cpu_s"] - one["cpu_s"]) / (count - 1)
                for r, one in zip(records[count], paired[count], strict=True)
            ],
        )
        if count == 32:
            per_host.targets = [Target("max", 5.0)]
        else:
            marginal.targets = [
                Target("ratio_max", 1.0, ref=f"{NAME}.{client}.marginal.32", ref_label="at 32")
            ]
        for key in ("children_cpu_s", "wall_s", "peak_rss_kib", "peak_threads", "peak_fds"):
            per_host.extra[key] = [round(r[key], 4) for r in records[count]]
        rows += [per_host, marginal]
    return rows


__all__ = ["NAME", "run"]
