"""paramiko vs the OpenSSH client: ``clusterlaunch exec HOSTS -- true`` on 1, 8, 32, 64 hosts.

    python -m benchmarks --only clients [--repeat 5] [--client-sizes 1,8,32]
    python -m benchmarks.clients [--repeat 5] [--sizes 1,8,32,64] [--pinned-kex]

Part of the main harness (``--only clients``: rows in the results table), and
runnable alone (a Markdown table on stdout, nothing written). Its own simulated
cluster, with the servers' *default* key exchange (neither sshd nor ssh pins
``KexAlgorithms``: real servers don't; OpenSSH then picks
sntrup761x25519-sha512, paramiko curve25519-sha256@libssh.org) and sessions
that skip ~/.bashrc (as in the main harness). The two clients alternate, round
after round. Reported per size and client: the wall time, and the CPU time of
the controller with every process it reaped (for OpenSSH: the ssh masters and
session clients) per host.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.core import Result
from benchmarks.env import REPO, Bench
from benchmarks.processes import BenchError, reap_usage
from clusterlaunch.testing import SshVariantCluster, find_free_port

NAME = "clients"
NEEDS = 1
"""Hosts of the harness's own cluster this uses: none really (it starts its own)."""
CLIENTS = ("paramiko", "openssh")
SIZES = (1, 8, 32, 64)
QUICK_SIZES = (1, 8)
PORT_FROM = 24600

Samples = dict[tuple[int, str], list[tuple[float, float]]]


def measure(
    sizes: Sequence[int],
    repeat: int,
    workdir: Path,
    default_kex: bool = True,
    log: Callable[[str], None] = lambda line: None,
) -> Samples:
    """{(size, client): [(wall s, cpu s), ...]} over ``repeat`` rounds (after one warm-up)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    samples: Samples = {}
    addrs = [f"127.0.0.{11 + i}" for i in range(max(sizes))]
    port = find_free_port(addrs, PORT_FROM)
    cluster = SshVariantCluster(  # sessions skip ~/.bashrc (SetEnv SHLVL=1)
        max(sizes), workdir / "cluster", port=port, default_kex=default_kex, login_rc=False
    )
    with cluster as c:
        for size in sizes:
            hosts = workdir / f"hosts-{size}.yaml"
            names = c.names[:size]
            hosts.write_text("hosts:\n" + "".join(f"  - host: {n}\n    gpus: 1\n" for n in names))
            for index in range(-1, repeat):
                log(f"{NAME}: {size} hosts, round {'warm-up' if index < 0 else index + 1}")
                for client in CLIENTS if index % 2 else reversed(CLIENTS):
                    config = ("--ssh-config", str(c.ssh_config))
                    argv = [sys.executable, "-m", "clusterlaunch", "exec", "--ssh-client",
                            client, *config, str(hosts), "--", "true"]  # fmt: skip
                    began = time.perf_counter()
                    process = subprocess.Popen(
                        argv, env=env, cwd=workdir, stdout=subprocess.DEVNULL
                    )
                    code, usage = reap_usage(process)
                    wall = time.perf_counter() - began
                    if code != 0:
                        raise BenchError(f"{client} on {size} hosts exited {code}")
                    if index >= 0:
                        cpu = usage.ru_utime + usage.ru_stime
                        samples.setdefault((size, client), []).append((wall, cpu))
    return samples


def results(samples: Samples) -> list[Result]:
    """Rows for the harness: wall time and controller CPU per host, openssh vs paramiko."""
    rows = []
    for what, unit, index, scale in (("wall", "s", 0, 1.0), ("cpu", "ms", 1, 1000.0)):
        for (size, client), runs in sorted(samples.items(), key=_paramiko_first):
            key = f"{NAME}.{what}.{client}.{size}"
            quantity = "wall" if what == "wall" else "CPU per host"
            rows.append(
                Result(
                    key,
                    NAME,
                    f"exec -- true, {size} hosts, {client}: {quantity} (default kex)",
                    unit,
                    samples=[run[index] * scale / (1 if what == "wall" else size) for run in runs],
                    baseline=None if client == "paramiko" else f"{NAME}.{what}.paramiko.{size}",
                    role="baseline" if client == "paramiko" else "info",
                )
            )
    return rows


def _paramiko_first(item: tuple[tuple[int, str], object]) -> tuple[int, int]:
    (size, client), _ = item
    return size, CLIENTS.index(client)


def run(bench: Bench) -> list[Result]:
    """The harness's entry: its own cluster under the harness's temporary directory."""
    sizes = bench.client_sizes or (QUICK_SIZES if bench.quick else SIZES)
    with tempfile.TemporaryDirectory(prefix="clients-", dir=bench.tmp) as workdir:
        return results(measure(sizes, bench.repeat, Path(workdir), log=bench.log))


def table(samples: Samples) -> str:
    """Markdown: median wall, median controller CPU, CPU per host."""
    rows = [
        "| hosts | client | wall (median) | controller CPU (median) | CPU per host |",
        "|---:|---|---:|---:|---:|",
    ]
    for (size, client), runs in sorted(samples.items()):
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        rows.append(
            f"| {size} | {client} | {wall:.2f} s | {cpu:.2f} s | {1000 * cpu / size:.0f} ms |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument(
        "--pinned-kex", action="store_true", help="curve25519-sha256 on both sides instead"
    )
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-clients-") as workdir:
        samples = measure(sizes, args.repeat, Path(workdir), default_kex=not args.pinned_kex)
    print(table(samples))
    print(f"\n{args.repeat} rounds; load average at the end: {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip


if __name__ == "__main__":
    main()
