"""paramiko vs the OpenSSH client: ``clusterlaunch exec HOSTS -- true`` on 1, 8, 32, 64 hosts.

    python -m benchmarks.clients [--repeat 5] [--sizes 1,8,32,64]

Its own simulated cluster, with the servers' *default* key exchange (neither
sshd nor ssh pins ``KexAlgorithms``: real servers don't; OpenSSH then picks
sntrup761x25519-sha512, paramiko curve25519-sha256@libssh.org) and sessions
that skip ~/.bashrc (as in the main harness). The two clients alternate, round
after round. Reported per size and client: median wall time, and the median
CPU time of the controller with every process it reaped (for OpenSSH: the ssh
masters and session clients), in total and per host. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.env import REPO, reap_usage
from clusterlaunch.testing import SshVariantCluster

CLIENTS = ("paramiko", "openssh")


class _NoRcVariantCluster(SshVariantCluster):
    """Default key exchange, and sessions that skip ~/.bashrc (``SetEnv SHLVL=1``)."""

    def _write_files(self) -> None:
        super()._write_files()
        self._edit_sshd(lambda text: re.sub(r"(?m)^SetEnv (.*)$", r"SetEnv \1 SHLVL=1", text))


def measure(
    sizes: list[int], repeat: int, workdir: Path, default_kex: bool = True
) -> dict[tuple[int, str], list[tuple[float, float]]]:
    """{(size, client): [(wall s, cpu s), ...]} over ``repeat`` rounds (after one warm-up)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    samples: dict[tuple[int, str], list[tuple[float, float]]] = {}
    cluster = _NoRcVariantCluster(
        max(sizes), workdir / "cluster", port=24600, default_kex=default_kex
    )
    with cluster as c:
        for size in sizes:
            hosts = workdir / f"hosts-{size}.yaml"
            names = c.names[:size]
            hosts.write_text("hosts:\n" + "".join(f"  - host: {n}\n    gpus: 1\n" for n in names))
            for index in range(-1, repeat):
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
                        raise SystemExit(f"{client} on {size} hosts exited {code}")
                    if index >= 0:
                        cpu = usage.ru_utime + usage.ru_stime
                        samples.setdefault((size, client), []).append((wall, cpu))
    return samples


def table(samples: dict[tuple[int, str], list[tuple[float, float]]]) -> str:
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
    parser.add_argument("--sizes", default="1,8,32,64")
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
