"""Overhead on a real 2-host torchrun gloo job (1 process per host).

``clusterlaunch run`` of a job that joins a gloo group, barriers and leaves,
against the same torchrun commands started by hand over OpenSSH on both hosts
in parallel (``ssh node0 'cd DIR && python -m torch.distributed.run ...' &``
and the same for node1, then wait for both). Both use the same interpreter,
the same script, the same static rendezvous on node0 and a fresh master port
per run, alternating, so torch's start-up cost is in both and cancels out.
"""

from __future__ import annotations

import shlex
import subprocess
import time

from benchmarks.core import Result, Target, rotate
from benchmarks.env import Bench, BenchError, reap

NAME = "overhead"
SCRIPT = "gloo_barrier.py"
NEEDS = 2
"""How many simulated hosts this measurement uses."""


def torchrun_command(bench: Bench, node_rank: int, port: int) -> str:
    """The command a user would type for one node."""
    argv = [
        bench.python, "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node_rank),
        "--rdzv-backend", "static", "--master-addr", "127.0.0.11", "--master-port", str(port),
        # Inside the benchmark's own directory, which is removed at the end:
        # without it every run leaves a /tmp/torchelastic_* directory behind.
        "--log-dir", str(bench.workdir / "torchrun-logs"),
        SCRIPT,
    ]  # fmt: skip
    return f"cd {shlex.quote(str(bench.workdir))} && exec {shlex.join(argv)}"


def by_hand(bench: Bench) -> float:
    """Both nodes' torchrun over OpenSSH, in parallel; seconds until both ended."""
    port = bench.master_port()
    began = time.perf_counter()
    processes = [
        subprocess.Popen(
            bench.ssh(host, torchrun_command(bench, rank, port)),
            env=bench.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank, host in enumerate(bench.names(2))
    ]
    codes = [reap(p) for p in processes]
    elapsed = time.perf_counter() - began
    if codes != [0, 0]:
        raise BenchError(f"torchrun over ssh exited {codes}")
    return elapsed


def run(bench: Bench) -> list[Result]:
    """Alternate the two ways of starting the job."""
    hand = Result(
        f"{NAME}.ssh",
        NAME,
        "torchrun by hand over OpenSSH, 2 hosts",
        "s",
        role="baseline",
    )
    cl = Result(
        f"{NAME}.clusterlaunch",
        NAME,
        "clusterlaunch run, 2 hosts × 1 process, gloo barrier",
        "s",
        baseline=hand.key,
        targets=[Target("delta_max", 0.5, ref=hand.key, ref_label="by hand")],
    )
    hosts = str(bench.hosts_file(2, torch=True))
    for index in bench.rounds(NAME):
        seconds = {}
        for which in rotate(["clusterlaunch", "ssh"], index):
            if which == "ssh":
                seconds[which] = by_hand(bench)
                continue
            port = str(bench.master_port())
            done = bench.run(bench.cl("run", "--master-port", port, hosts, SCRIPT)).check()
            seconds[which] = done.seconds
            if index >= 0:
                cl.extra.setdefault("peak_rss_kib", []).append(done.peak_rss_kib)
                cl.extra.setdefault("local_cpu_s", []).append(round(done.cpu_s, 4))
        if index >= 0:
            cl.samples.append(seconds["clusterlaunch"])
            hand.samples.append(seconds["ssh"])
    leftovers = bench.assert_clean()
    cl.problems += leftovers
    if bench.profile_dir is not None:
        argv = bench.cl(
            "run", "--master-port", str(bench.master_port()), hosts, SCRIPT, profile_as=NAME
        )
        bench.run(argv).check()
    return [cl, hand]
