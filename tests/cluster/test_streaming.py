"""Adversarial streaming: every byte a job writes before it exits reaches the console and --log-dir.

Real sshd hosts, real agents, real torchrun. The reader of clusterlaunch's
output stalls at the start (like ``clusterlaunch run ... | (sleep 5; cat)``),
so the SSH channel's 16 MiB window and the agent's 8 MiB output cap fill up
and backpressure reaches the job; the jobs write numbered lines, progress
redraws, CRLF, non-UTF-8 and NUL bytes, a last line without a newline, and
exit the moment they are done (one of them with a failure). Each segment of
the output names its source, so the interleaved console can be taken apart
and compared with what each source wrote, byte for byte.
"""

from __future__ import annotations

import importlib.util
import os
import re
import select
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.cluster.support import PYTHON, WORKERS, run_cli_bytes, start_cli, write_hosts

pytestmark = [pytest.mark.cluster]

MIB = 1 << 20
EXEC_REPETITIONS = 18  # + 2 torchrun jobs below: 20 repetitions
_AFTER_BARE_CR = re.compile(rb"(?<=\r)(?=.)", re.S)  # inside a line: after a \r, not at its end
_PREFIX = re.compile(rb"\[([^\]]+)\] +")


@cache
def burst() -> ModuleType:
    """The worker module, for the exact bytes it writes."""
    spec = importlib.util.spec_from_file_location("burst", WORKERS / "burst.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def payload(tag: bytes, size: int) -> bytes:
    return bytes(burst().payload(tag, size))


def run_with_slow_reader(
    stall: float, *args: Any, until: Callable[[], bool] | None = None
) -> tuple[int, bytes, bytes]:
    """Run the CLI; nobody reads its stdout or stderr until ``until()`` and ``stall`` s more."""
    process = start_cli(*args)
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + 90

    def read(name: str) -> None:
        while until is not None and not until() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(stall)
        stream = process.stdout if name == "out" else process.stderr
        assert stream is not None
        got[name] = stream.read()

    readers = [threading.Thread(target=read, args=(name,)) for name in ("out", "err")]
    for reader in readers:
        reader.start()
    try:
        code = process.wait(timeout=120)
    finally:
        process.kill()
        for reader in readers:
            reader.join(timeout=30)
    return code, got["out"], got["err"]


def segments(text: bytes) -> Iterator[bytes]:
    """``text`` cut after every newline and every bare carriage return."""
    lines = text.split(b"\n")
    for index, line in enumerate(lines):
        end = b"\n" if index < len(lines) - 1 else b""
        parts = _AFTER_BARE_CR.split(line) if b"\r" in line else [line]
        yield from parts[:-1]
        yield parts[-1] + end


def take_apart(text: bytes, prefixed: bool) -> dict[bytes, bytes]:
    """Bytes per source tag (``o<label>``/``e<label>``), prefixes removed; other lines dropped."""
    found: dict[bytes, bytearray] = defaultdict(bytearray)
    for segment in segments(text):
        if prefixed:
            prefix = _PREFIX.match(segment)
            if prefix is None:
                continue  # clusterlaunch's own messages, the failure summary
            label, segment = prefix.group(1).split(b" ")[0], segment[prefix.end() :]
            if segment[1:].split(b" ", 1)[0] != label:
                continue  # torchrun's own lines ([node0] ...)
        tag = segment.split(b" ", 1)[0]
        if tag[:1] in (b"o", b"e") and segment:
            found[tag] += segment
    return {tag: bytes(data) for tag, data in found.items()}


def assert_same(where: str, tag: bytes, got: bytes | None, expected: bytes) -> None:
    if got == expected:
        return
    got = got or b""
    lost = expected.count(b"\n") - got.count(b"\n")
    offset = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
    raise AssertionError(
        f"{where}: {tag.decode()} got {len(got)} of {len(expected)} bytes "
        f"({lost} line(s) missing; first difference at {offset})"
    )


def check_source(
    tag: bytes, expected: bytes, console: dict[bytes, bytes], log: dict[bytes, bytes], exact: bool
) -> None:
    shown = expected if expected.endswith(b"\n") else expected + b"\n"  # display newline
    assert_same("console", tag, console.get(tag), shown)
    assert_same("--log-dir", tag, log.get(tag), expected if exact else shown)


@pytest.mark.parametrize("repetition", range(EXEC_REPETITIONS))
def test_exec_every_byte_arrives_through_a_stalled_reader(
    sim_cluster, tmp_path: Path, repetition: int
) -> None:
    # node0 overflows window + cap (so its job waits for the reader); node1 fails
    # right after its burst; sizes shift by repetition so chunk and frame
    # boundaries fall elsewhere each time. The first repetition instead keeps
    # the reader stalled until 5.5 s after every job is done (longer than any
    # time limit the agent used to have), with 20 MiB: more than the channel
    # window holds, less than makes the job wait.
    late = repetition == 0
    sizes = {
        "node0": ((20 if late else 26) * MIB + repetition * 977, 256 * 1024, 0),
        "node1": (512 * 1024 + repetition * 131, 128 * 1024 + repetition, 3),
        "node2": (512 * 1024, 64 * 1024 + repetition * 17, 0),
    }
    logs, done = tmp_path / "logs", tmp_path / "done"
    done.mkdir()
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            (host, 1, {"env": {"BURST_LABEL": host, "BURST_OUT": str(out), "BURST_ERR": str(err),
                               "BURST_EXIT": str(code), "BURST_DONE": str(done)}})
            for host, (out, err, code) in sizes.items()
        ],
    )  # fmt: skip
    code, out, err = run_with_slow_reader(
        5.5 if late else 0.5, "exec", sim_cluster, "--log-dir", str(logs),
        str(hosts), "--", PYTHON, str(WORKERS / "burst.py"), "0", "0",
        until=(lambda: len(list(done.iterdir())) == 3) if late else None,
    )  # fmt: skip
    assert code == 3, err[-2000:]
    console = {**take_apart(out, True), **take_apart(err, True)}
    log = take_apart((logs / "controller.log").read_bytes(), True)
    for node_rank, (host, (out_size, err_size, _)) in enumerate(sizes.items()):
        node_log = take_apart((logs / f"node-{node_rank}.log").read_bytes(), False)
        for stream, size in ((b"o", out_size), (b"e", err_size)):
            tag = stream + host.encode()
            check_source(tag, payload(tag, size), console, log, exact=False)
            check_source(tag, payload(tag, size), console, node_log, exact=True)  # as sent
    assert b"job failed: 1 of 3 host(s) failed: node1 (3)" in err


@pytest.mark.torch
def test_torchrun_many_ranks_per_host_exit_right_after_a_burst(sim_cluster, tmp_path: Path) -> None:
    # 3 ranks on node0 write 27 MiB into their files (more than the channel
    # window and the agent's cap hold) and exit at once; nobody reads from
    # before they start until 5.5 s after they are done, longer than any time
    # limit the agent used to have for its last output.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 3), ("node1", 1)])
    logs, done = tmp_path / "logs", tmp_path / "done"
    done.mkdir()
    out_size, err_size = 8 * MIB + 4321, MIB + 123
    code, out, err = run_with_slow_reader(
        5.5, "run", sim_cluster, "--log-dir", str(logs), "--env", f"BURST_DONE={done}",
        str(hosts), "burst.py", str(out_size), str(err_size),
        until=lambda: len(list(done.iterdir())) == 4,
    )  # fmt: skip
    assert code == 0, err[-2000:]
    console = {**take_apart(out, True), **take_apart(err, True)}
    for rank in range(4):
        log = take_apart((logs / f"rank-{rank}.log").read_bytes(), False)
        for stream, size in ((b"o", out_size), (b"e", err_size)):
            tag = b"%sr%d" % (stream, rank)
            check_source(tag, payload(tag, size), console, log, exact=True)


@pytest.mark.torch
def test_torchrun_huge_lines_are_never_split_or_cut(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2)])
    logs = tmp_path / "logs"
    size = 13_000_000  # three times the 4 MiB a line may wait for its end
    code, out, err = run_with_slow_reader(
        2, "run", sim_cluster, "--log-dir", str(logs), str(hosts), "burst.py", "huge", str(size)
    )
    assert code == 0, err[-2000:]
    lines = [burst().huge_line(rank, size) for rank in (0, 1)]
    assert (logs / "rank-0.log").read_bytes() == lines[0]  # exact: no newline added
    assert (logs / "rank-1.log").read_bytes() == lines[1]
    start = out.index(b"[r0 node0:0] ")
    assert out[start:] == b"[r0 node0:0] " + lines[0] + b"\n"  # one prefix, one line
    assert b"[r1 node0:1] " + lines[1] + b"\n" in err


@pytest.mark.torch
def test_a_line_past_the_cut_is_never_joined_to_the_other_streams(
    sim_cluster, tmp_path: Path
) -> None:
    """The hostile tester's rank: 5,000,000 bytes on stderr, then a 3,000,021-byte line on
    stdout, neither ended. rank-1.log held the stdout line inside the stderr one, and the
    summary quoted lines of 7,456,469 and 543,552 bytes, the stdout line not at all."""
    spec = importlib.util.spec_from_file_location("longline", WORKERS / "longline.py")
    assert spec is not None and spec.loader is not None
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    logs = tmp_path / "logs"
    result = run_cli_bytes("run", sim_cluster, "--log-dir", str(logs), str(hosts), "longline.py")
    assert result.returncode == 3, result.stderr[-2000:]
    assert (logs / "rank-1.log").read_bytes() == worker.ERR_LINE + worker.OUT_LINE
    summary = result.stderr.split(b"last 2 line(s) of rank 1:\n")[1].splitlines()
    assert sorted(summary) == [
        b"  | " + b"E" * 2000 + b" ... (5000000 bytes in all)",
        b"  | start " + b"y" * 1994 + b" ... (3000021 bytes in all)",
    ]


def test_fail_fast_teardown_waits_for_output_still_arriving(sim_cluster, tmp_path: Path) -> None:
    # node1 fails while node0 has tens of MiB on their way; the reader then
    # stalls for longer than teardown's own limit (--grace 1 + 3 s): what node0
    # wrote before it was stopped must still arrive, and its agent must confirm.
    trigger, done = tmp_path / "fail-now", tmp_path / "done"
    done.mkdir()
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1, {"env": {"BURST_LABEL": "node0", "BURST_OUT": str(40 * MIB)}}),
            ("node1", 1, {"env": {"BURST_LABEL": "node1", "BURST_OUT": str(256 * 1024),
                                  "BURST_EXIT": "3", "BURST_AFTER": str(trigger),
                                  "BURST_DONE": str(done)}}),
        ],
    )  # fmt: skip
    process = start_cli(
        "exec", sim_cluster, "--fail-fast", "--grace", "1", str(hosts),
        "--", PYTHON, str(WORKERS / "burst.py"), "0", "1",
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    seen = bytearray()
    while b"onode1 last line" not in seen[-(1 << 20) :]:  # node1 has ended: teardown begins
        chunk = process.stdout.read1(1 << 16)
        assert chunk, bytes(seen[-500:])
        seen += chunk
        if len(seen) > MIB and not trigger.exists():
            trigger.touch()  # node0 is streaming now, with the channel and cap full
            # Nothing read until node1 has written its burst (it exits right after): node0
            # is held by the full console meanwhile, so however loaded this machine is, it
            # cannot end first (it once did: the precondition below failed, under load).
            deadline = time.monotonic() + 60
            while not (done / "node1").exists():
                assert time.monotonic() < deadline, "node1 never wrote its burst"
                time.sleep(0.05)
    time.sleep(6)
    out = bytes(seen) + process.stdout.read()
    err = process.stderr.read()
    assert process.wait(timeout=60) == 3, err[-2000:]
    assert b"no confirmation" not in err, err[-2000:]
    got = take_apart(out, True)[b"onode0"]
    written = payload(b"onode0", 40 * MIB)
    cut = len(got) if written.startswith(got) else len(got) - 1  # display newline at a cut
    assert written.startswith(got[:cut]) and got[cut:] in (b"", b"\n")
    assert cut < len(written), "node0 ended before node1 failed: nothing was tested"


def test_progress_redraw_reaches_the_console_while_the_line_is_unfinished(
    sim_cluster, tmp_path: Path
) -> None:
    # The job prints one redraw, then waits until the test has seen it: it can
    # only finish if the redraw was passed on live, not when its line ended.
    trigger = tmp_path / "seen"
    script = tmp_path / "redraw.py"
    script.write_text(
        "import os, sys, time\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'step 1/2\\r'); out.flush()\n"
        f"while not os.path.exists({str(trigger)!r}): time.sleep(0.05)\n"
        "out.write(b'step 2/2\\rdone\\n'); out.flush()\n"
    )
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    process = start_cli("exec", sim_cluster, str(hosts), "--", PYTHON, str(script))
    assert process.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"step 1/2\r" not in seen:
        assert time.monotonic() < deadline, f"no live redraw: {seen!r}"
        if select.select([process.stdout], [], [], 1.0)[0]:
            chunk = os.read(process.stdout.fileno(), 4096)
            assert chunk, f"output ended without the redraw: {seen!r}"
            seen += chunk
    trigger.touch()
    seen += process.stdout.read()
    assert process.wait(timeout=60) == 0
    assert seen == b"[node0] step 1/2\r[node0] step 2/2\r[node0] done\n"


def test_exec_prints_what_looks_like_torchruns_banner_as_it_is(sim_cluster, tmp_path: Path) -> None:
    """run folds torchrun's OMP_NUM_THREADS banner; exec's output is the command's own.

    exec once dropped every blank line before a line of 20 stars, and the stars.
    """
    banner = (
        b"\n*****************************************\n"
        b"Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
        b"to avoid your system being overloaded. \n"
        b"*****************************************\n"
    )
    text = b"before\n" + banner + b"\n" + b"*" * 40 + b"\nafter\n"
    data = tmp_path / "banner.txt"
    data.write_bytes(text)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = run_cli_bytes("exec", sim_cluster, str(hosts), "--", "cat", str(data))
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"".join(b"[node0] " + line for line in text.splitlines(True))
    assert b"folded" not in result.stderr
