"""Log throughput: one host prints 10,000,000 lines through ``exec``, prefixed, into a file.

``clusterlaunch exec HOST -- seq N > file`` against ``ssh HOST seq N > /dev/null``:
OpenSSH moves the same bytes without looking at them, which bounds what any
launcher can do on this machine. After every clusterlaunch run the file is
compared byte for byte with what it must hold (every line, in order, prefixed).
"""

from __future__ import annotations

import re
import subprocess

from benchmarks.core import Result, Target, rotate
from benchmarks.env import Bench
from benchmarks.processes import BenchError

NAME = "throughput"
LINES = 10_000_000
QUICK_LINES = 200_000
NEEDS = 1
"""How many simulated hosts this measurement uses."""


def expected_output(prefix: bytes, first: int, last: int) -> bytes:
    """``seq``'s lines ``first``..``last`` with ``prefix`` before every line."""
    return b"".join(b"%s%d\n" % (prefix, i) for i in range(first, last + 1))


def check_output(data: bytes, lines: int, block: int = 100_000) -> list[str]:
    """Problems with a run's output file (empty list: every line, in order, prefixed).

    Compared block by block, so 10M lines never need a second copy in memory.
    """
    match = re.match(rb"(\[node0\] +)1\n", data)
    if match is None:
        return [f"output does not start with a prefixed first line: {data[:60]!r}"]
    view = memoryview(data)
    offset = 0
    for first in range(1, lines + 1, block):
        expected = expected_output(match[1], first, min(lines, first + block - 1))
        if view[offset : offset + len(expected)] != expected:
            got = data.count(b"\n")
            return [f"output differs from seq's near line {first} ({got} of {lines} lines)"]
        offset += len(expected)
    if offset != len(data):
        return [f"{len(data) - offset} bytes after seq's {lines} lines"]
    return []


def run(bench: Bench) -> list[Result]:
    """Interleave clusterlaunch-to-file and ssh-to-/dev/null runs; rates in lines/s."""
    lines = QUICK_LINES if bench.quick else LINES
    ssh = Result(
        f"{NAME}.ssh",
        NAME,
        f"ssh host seq {lines} > /dev/null",
        "lines/s",
        higher_is_better=True,
        role="baseline",
    )
    cl = Result(
        f"{NAME}.clusterlaunch",
        NAME,
        f"clusterlaunch exec, seq {lines}, prefixed > file",
        "lines/s",
        higher_is_better=True,
        baseline=ssh.key,
        targets=[Target("ratio_min", 0.6, ref=ssh.key, ref_label="OpenSSH")],
    )
    host = bench.names(1)[0]
    hosts = str(bench.hosts_file(1))
    ssh_argv = bench.ssh(host, f"seq {lines}")
    # The baseline really moves every line (checked once, through a pipe).
    counted = bench.run(ssh_argv, stdout=subprocess.PIPE).check().stdout.count(b"\n")
    if counted != lines:
        raise BenchError(f"ssh delivered {counted} of {lines} lines")
    out_path = bench.tmp / "throughput.out"
    cl_stream = Result(
        f"{NAME}.clusterlaunch_streaming",
        NAME,
        f"clusterlaunch: time of seq {lines} minus time of seq 1",
        "s",
        role="info",
        baseline=f"{NAME}.ssh_streaming",
    )
    ssh_stream = Result(
        f"{NAME}.ssh_streaming",
        NAME,
        f"OpenSSH: time of seq {lines} minus time of seq 1",
        "s",
        role="info",
    )
    for index in bench.rounds(NAME):
        timed = {}
        # seq N is what is judged; seq 1 gives each tool's fixed cost (start-up,
        # connection, exit), so that the difference is the cost of the lines alone.
        variants = [("clusterlaunch", lines), ("ssh", lines), ("clusterlaunch", 1), ("ssh", 1)]
        for which, count in rotate(variants, index):
            if which == "ssh":
                timed[which, count] = bench.run(bench.ssh(host, f"seq {count}")).check()
                continue
            with out_path.open("wb") as out:
                argv = bench.cl("exec", hosts, "--", "seq", str(count))
                timed[which, count] = bench.run(argv, stdout=out).check()
            cl.problems += check_output(out_path.read_bytes(), count)  # warm-up's too
            out_path.unlink()
        if index < 0:
            continue
        mine = timed["clusterlaunch", lines]
        cl.samples.append(lines / mine.seconds)
        cl.extra.setdefault("peak_rss_kib", []).append(mine.peak_rss_kib)
        cl.extra.setdefault("local_cpu_s", []).append(round(mine.cpu_s, 4))
        ssh.samples.append(lines / timed["ssh", lines].seconds)
        for result, which in ((cl_stream, "clusterlaunch"), (ssh_stream, "ssh")):
            result.samples.append(timed[which, lines].seconds - timed[which, 1].seconds)
    cl.problems = sorted(set(cl.problems))
    cl.problems += bench.assert_clean()
    if bench.profile_dir is not None:
        with out_path.open("wb") as out:
            argv = bench.cl("exec", hosts, "--", "seq", str(lines), profile_as=NAME)
            bench.run(argv, stdout=out).check()
        out_path.unlink()
    return [cl, ssh, cl_stream, ssh_stream]
