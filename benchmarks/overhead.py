"""Overhead on real 2-host torchrun gloo jobs (1 process per host), against torchrun by hand.

Two jobs: ``barrier`` (join a gloo group, barrier, leave: the smallest real
job) and ``ddp`` (``ddp_multinode.py``, pytorch/examples' multi-node DDP
tutorial in structure: a tiny model, a ``DistributedSampler``, 5 epochs, a
snapshot). Each is run by ``clusterlaunch run`` and by the same torchrun
commands started by hand over OpenSSH on both hosts in parallel
(``ssh node0 'cd DIR && python -m torch.distributed.run ...' &`` and the same
for node1, then wait for both). Both use the same interpreter, the same script,
the same static rendezvous on node0 and a fresh master port per run,
alternating, so torch's start-up cost is in both and cancels out.
"""

from __future__ import annotations

import shlex
import subprocess
import time

from benchmarks.core import Result, Target, rotate
from benchmarks.env import Bench, BenchError, reap

NAME = "overhead"
NEEDS = 2
"""How many simulated hosts this measurement uses."""
TARGET_S = 0.2
"""Issue 17: at most this much over torchrun by hand (was 0.5 s before the preflight fold)."""
JOBS = {
    "barrier": ("gloo barrier", "gloo_barrier.py"),
    "ddp": ("DDP tutorial (multinode.py), 5 epochs", "ddp_multinode.py"),
}


def job_argv(bench: Bench, job: str) -> list[str]:
    """The script and its arguments; the DDP job saves its snapshot where no run resumes it."""
    script = JOBS[job][1]
    if job != "ddp":
        return [script]
    snapshot = bench.tmp / f"snapshot-{bench.master_port()}.pt"  # a fresh name each run
    return [script, "5", "2", "--snapshot_path", str(snapshot)]


def torchrun_command(bench: Bench, node_rank: int, port: int, argv: list[str]) -> str:
    """The command a user would type for one node."""
    argv = [
        bench.python, "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node_rank),
        "--rdzv-backend", "static", "--master-addr", "127.0.0.11", "--master-port", str(port),
        # Inside the benchmark's own directory, which is removed at the end:
        # without it every run leaves a /tmp/torchelastic_* directory behind.
        "--log-dir", str(bench.workdir / "torchrun-logs"),
        *argv,
    ]  # fmt: skip
    return f"cd {shlex.quote(str(bench.workdir))} && exec {shlex.join(argv)}"


def by_hand(bench: Bench, job: str) -> float:
    """Both nodes' torchrun over OpenSSH, in parallel; seconds until both ended."""
    port = bench.master_port()
    argv = job_argv(bench, job)
    began = time.perf_counter()
    processes = [
        subprocess.Popen(
            bench.ssh(host, torchrun_command(bench, rank, port, argv)),
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
    """Both jobs, each alternating the two ways of starting it."""
    return [result for job in JOBS for result in run_job(bench, job)]


def run_job(bench: Bench, job: str) -> list[Result]:
    """Alternate ``clusterlaunch run`` and torchrun by hand on ``job``."""
    title = JOBS[job][0]
    hand = Result(
        f"{NAME}.{job}.ssh",
        NAME,
        f"torchrun by hand over OpenSSH, 2 hosts, {title}",
        "s",
        role="baseline",
    )
    cl = Result(
        f"{NAME}.{job}.clusterlaunch",
        NAME,
        f"clusterlaunch run, 2 hosts × 1 process, {title}",
        "s",
        baseline=hand.key,
        targets=[Target("delta_max", TARGET_S, ref=hand.key, ref_label="by hand")],
    )
    hosts = str(bench.hosts_file(2, torch=True))
    for index in bench.rounds(f"{NAME} {job}"):
        seconds = {}
        for which in rotate(["clusterlaunch", "ssh"], index):
            if which == "ssh":
                seconds[which] = by_hand(bench, job)
                continue
            port = str(bench.master_port())
            argv = bench.cl("run", "--master-port", port, hosts, *job_argv(bench, job))
            done = bench.run(argv).check()
            seconds[which] = done.seconds
            if index >= 0:
                cl.extra.setdefault("peak_rss_kib", []).append(done.peak_rss_kib)
                cl.extra.setdefault("local_cpu_s", []).append(round(done.cpu_s, 4))
        if index >= 0:
            cl.samples.append(seconds["clusterlaunch"])
            hand.samples.append(seconds["ssh"])
    cl.problems += bench.assert_clean()
    if bench.profile_dir is not None:
        port = str(bench.master_port())
        argv = bench.cl(
            "run", "--master-port", port, hosts, *job_argv(bench, job), profile_as=f"{NAME}-{job}"
        )
        bench.run(argv).check()
    return [cl, hand]
