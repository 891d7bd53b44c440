"""What torchrun's per-rank files take on disk, and what emptying them costs the agent.

    python -m benchmarks.rank_files [--mb 200] [--rate MIBS] [--rounds 7] [--against DIR]

Two measurements, each round alternating the variants (the first one rotating):

* ``tail``: the agent's own loop over one rank file of ``--mb`` MiB of 1 KiB lines
  already written (``RankTail.poll``, each chunk framed and written to /dev/null), with
  the holes punched behind its reads and without (``HolePuncher.works`` off), the files'
  removal at its end included (the blocks kept are freed then): CPU seconds per MiB of
  the process (``time.process_time``), for reads of 256 KiB (the agent's
  ``CHUNK``, a job writing faster than it reads) and of 16 KiB (a slower one: more
  polls, more punches);
* ``job`` (with ``--against DIR``, another checkout such as a worktree of main): a real
  ``clusterlaunch run`` of one rank on ``localhost`` writing ``--mb`` MiB (at ``--rate``
  MiB/s: a chatty job; else as fast as it can: the folder holds what the controller
  has not taken yet), this checkout's
  and DIR's in turn: the largest ``du`` of the job's rank folder, sampled every 20 ms,
  and the agent's CPU seconds (its ``/proc/PID/stat``, last sampled) per MiB.

Not part of ``python -m benchmarks``: it needs no cluster and compares clusterlaunch with
no other tool. The numbers are quoted in docs/architecture.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clusterlaunch.remote.tail import RankTail
from clusterlaunch.remote.wire import Output

LINE = b"y" * 1023 + b"\n"
WORKER = Path(__file__).parent / "workers" / "write_mb.py"
TICKS = os.sysconf("SC_CLK_TCK")


def tail_cpu_s(folder: Path, mb: int, budget: int, punch: bool) -> float:
    """CPU seconds the agent's loop takes to read, frame and send ``mb`` MiB of one rank."""
    rank_file = folder / "job" / "run_0" / "attempt_0" / "0" / "stdout.log"
    rank_file.parent.mkdir(parents=True, exist_ok=True)
    with rank_file.open("wb") as out:
        for _ in range(mb):
            out.write(LINE * 1024)
    with open(os.devnull, "wb") as sink:
        tail, output = RankTail(str(folder / "job"), 0), Output(sink.fileno())
        tail.puncher.works = punch
        output.start()
        began = time.process_time()
        while chunks := tail.poll(budget):
            for tag, data in chunks:
                output.frame(tag, data)
            output.flush()
        tail.poll(budget)  # what the last poll read is given back by the next
        held = rank_file.stat().st_blocks * 512
        tail.remove()  # as the agent does at the end: kept blocks are freed only then
        took = time.process_time() - began
    if punch and held >= 1 << 20:
        raise SystemExit(f"{held} bytes still held with punching: no punching here?")
    return took


def job_run(
    checkout: Path, mb: int, rate: float, work: Path, round_number: int
) -> tuple[int, float]:
    """(largest du of the rank folder in bytes, agent CPU seconds) of one real job."""
    job_id = f"rankfiles-{os.getpid()}-{round_number}-{checkout.name}"
    hosts = work / "hosts.yaml"
    hosts.write_text(
        f"defaults: {{python: {sys.executable}}}\nhosts:\n  - {{host: localhost, gpus: 1}}\n"
    )
    argv = [sys.executable, "-m", "clusterlaunch", "run", "--job-id", job_id, str(hosts)]
    env = dict(os.environ, PYTHONPATH=str(checkout))
    process = subprocess.Popen(
        [*argv, str(WORKER), str(mb), str(rate)], cwd=checkout, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    root = Path(f"/tmp/clusterlaunch-{os.getuid()}")
    largest, agent, cpu = 0, None, 0.0
    while process.poll() is None:
        for folder in root.glob(f"{job_id}@*"):
            largest = max(largest, du(folder))
        agent = agent or find_agent(job_id)
        cpu = agent_cpu_s(agent, cpu)
        time.sleep(0.02)
    if process.returncode != 0:
        raise SystemExit(f"the job of {checkout} failed ({process.returncode})")
    return largest, cpu


def du(folder: Path) -> int:
    total = 0
    for parent, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except OSError:
                continue
    return total


def find_agent(job_id: str) -> int | None:
    """The agent of ``job_id``: the process whose argv holds its id and the agent's options."""
    for name in os.listdir("/proc"):
        try:
            words = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if job_id.encode() in words and b"--rank-files" in words and b"-S" in words:
            return int(name)
    return None


def agent_cpu_s(pid: int | None, last: float) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return last
    return (int(fields[11]) + int(fields[12])) / TICKS


def shown(values: list[float], scale: float = 1.0, unit: str = "") -> str:
    q1, median, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else values * 3
    return f"{median * scale:.3f} ({q1 * scale:.3f}-{q3 * scale:.3f}){unit}"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rank_files")
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--rate", type=float, default=0.0, help="the job's MiB/s (0: all out)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--against", type=Path, help="another checkout, for the job rows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        folder = Path(scratch)
        for budget in (1 << 18, 1 << 14):
            cpu: dict[bool, list[float]] = {True: [], False: []}
            for number in range(args.rounds):
                for punch in (True, False)[:: 1 if number % 2 else -1]:
                    cpu[punch].append(tail_cpu_s(folder, args.mb, budget, punch) / args.mb)
            ratio = [a / b for a, b in zip(cpu[True], cpu[False], strict=True)]
            for punch in (False, True):
                what = "punched" if punch else "kept   "
                print(f"tail {budget >> 10:3d} KiB reads, {what}: {shown(cpu[punch], 1e3)} ms/MiB")
            print(f"tail {budget >> 10:3d} KiB reads, punched/kept (paired): {shown(ratio)}")
        if args.against is None:
            return
        here = Path(__file__).resolve().parents[1]
        runs: dict[Path, list[tuple[int, float]]] = {here: [], args.against.resolve(): []}
        for number in range(args.rounds):
            for checkout in list(runs)[:: 1 if number % 2 else -1]:
                runs[checkout].append(job_run(checkout, args.mb, args.rate, folder, number))
        for checkout, rows in runs.items():
            sizes, cpus = [r[0] / 2**20 for r in rows], [r[1] / args.mb for r in rows]
            print(f"job {checkout}: largest du {shown(sizes, unit=' MiB')}, "
                  f"agent {shown(cpus, 1e3)} ms CPU/MiB")  # fmt: skip


if __name__ == "__main__":
    main()
