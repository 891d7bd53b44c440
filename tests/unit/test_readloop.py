"""The controller's one read loop and parallel start, with real local processes (no sshd)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from clusterlaunch.controller.batch import Batch, run_all
from clusterlaunch.controller.readloop import read_round, start_all
from clusterlaunch.core.errors import TransportError
from clusterlaunch.transport.base import RemoteProcess
from clusterlaunch.transport.local import LocalConnection, LocalProcess

LOCAL = LocalConnection()


def read_to_end(processes: dict[str, RemoteProcess]) -> dict[str, tuple[bytes, bytes, int]]:
    """Run read_round until every process finished: (stdout, stderr, rounds it was read in)."""
    seen = {key: (b"", b"", 0) for key in processes}

    def take(key: str, out: bytes, err: bytes) -> None:
        old_out, old_err, rounds = seen[key]
        seen[key] = (old_out + out, old_err + err, rounds + 1)

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        running = [(k, p) for k, p in processes.items() if not p.finished()]
        if not running:
            break
        read_round(running, 0.2, take)
    for process in processes.values():
        process.close()
    return seen


def test_every_process_is_read_to_its_end_stdout_and_stderr_apart() -> None:
    processes: dict[str, RemoteProcess] = {
        "quiet": LOCAL.start("true"),
        "both": LOCAL.start("printf out; printf err >&2"),
        "big": LOCAL.start("head -c 3000000 /dev/zero"),
        "stdin": LOCAL.start("cat", b"fed on stdin\n"),
    }
    processes["stdin"].close_stdin()
    seen = read_to_end(processes)
    assert seen["quiet"][:2] == (b"", b"")
    assert seen["both"][:2] == (b"out", b"err")
    assert seen["big"][0] == b"\0" * 3_000_000
    assert seen["big"][2] >= 3  # read in 1 MiB pieces, over several rounds
    assert seen["stdin"][:2] == (b"fed on stdin\n", b"")


def test_the_callback_hears_from_every_process_each_round_bytes_or_not() -> None:
    silent = LOCAL.start("sleep 30")
    talking = LOCAL.start("echo hi; sleep 30")
    calls: list[tuple[str, bytes]] = []
    try:
        moved = 0
        while moved == 0:
            moved = read_round(
                [("silent", silent), ("talking", talking)],
                5.0,
                lambda key, out, err: calls.append((key, out)),
            )
        assert moved == 3
        assert [key for key, _ in calls][-2:] == ["silent", "talking"]
        assert calls[-1] == ("talking", b"hi\n")
    finally:
        for process in (silent, talking):
            process.close()
            process._popen.kill()  # type: ignore[attr-defined]
            process._popen.wait()  # type: ignore[attr-defined]


def test_output_ends_the_wait_and_silence_lasts_the_timeout() -> None:
    process = LOCAL.start("read line; echo got $line; sleep 30")
    assert isinstance(process, LocalProcess)
    heard: list[bytes] = []
    try:
        started = time.monotonic()
        assert read_round([("p", process)], 0.3, lambda *_: None) == 0
        assert time.monotonic() - started >= 0.25  # nothing to read: the whole timeout
        process.send(b"x\n")
        started = time.monotonic()
        while not heard:
            read_round(
                [("p", process)], 20.0, lambda _k, out, _e: heard.append(out) if out else None
            )
        assert time.monotonic() - started < 10  # woken by the output, not by the 20 s timeout
        assert heard == [b"got x\n"]
    finally:
        process.close()
        process._popen.kill()
        process._popen.wait()


class CountingConnection:
    """A connection that counts how many channel opens run at once.

    Each open waits (up to 5 s) until ``overlap`` opens have been seen at once,
    so the count does not depend on how fast threads start on a busy machine.
    """

    host = "counting"

    def __init__(
        self, overlap: int = 1, refuse: set[str] | None = None, crash: set[str] | None = None
    ) -> None:
        self.cond = threading.Condition()
        self.now = 0
        self.most = 0
        self.overlap = overlap
        self.refuse = refuse or set()
        self.crash = crash or set()
        self.started: list[RemoteProcess] = []

    def start(self, command: str, stdin: bytes = b"") -> RemoteProcess:
        with self.cond:
            self.now += 1
            self.most = max(self.most, self.now)
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.most >= self.overlap, timeout=5)
        try:
            if command in self.refuse:
                raise TransportError(command, "cannot start a command: refused")
            if command in self.crash:
                raise RuntimeError("a bug")
            process = LOCAL.start(f"echo {command}", stdin)
            self.started.append(process)
            return process
        finally:
            with self.cond:
                self.now -= 1

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fanout", [1, 3, 64])
def test_start_all_opens_at_most_fanout_channels_at_once(fanout: int) -> None:
    connection = CountingConnection(overlap=min(fanout, 8))
    commands = [f"c{i}" for i in range(8)]
    processes = start_all([(connection, c, b"") for c in commands], fanout)  # type: ignore[misc]
    assert connection.most == min(fanout, 8)
    assert all(not isinstance(p, TransportError) for p in processes)
    outputs = read_to_end({c: p for c, p in zip(commands, processes, strict=True)})  # type: ignore[misc]
    assert [outputs[c][0] for c in commands] == [f"{c}\n".encode() for c in commands]


def test_start_all_returns_a_host_problem_in_place_and_raises_anything_else() -> None:
    refusing = CountingConnection(refuse={"c1"})
    results = start_all([(refusing, c, b"") for c in ("c0", "c1", "c2")], 4)  # type: ignore[misc]
    assert isinstance(results[1], TransportError)
    assert results[1].detail == "cannot start a command: refused"
    read_to_end({"a": results[0], "b": results[2]})  # type: ignore[dict-item]

    crashing = CountingConnection(crash={"c1"})
    with pytest.raises(RuntimeError, match="a bug"):
        start_all([(crashing, c, b"") for c in ("c0", "c1", "c2")], 4)  # type: ignore[misc]
    # What did start was closed, not left behind with open pipes.
    assert crashing.started and all(p.finished() or not p.waitables() for p in crashing.started)


def test_batch_reports_each_command_in_the_order_given() -> None:
    refusing = CountingConnection(refuse={"x"})
    jobs = {
        "ok": (LOCAL, "cat; echo err >&2"),
        "fails": (LOCAL, "exit 3"),
        "slow": (LOCAL, "sleep 3"),
        "refused": (refusing, "x"),
    }
    results = Batch(jobs, stdin=b"to stdin\n", fanout=2).wait(0.5)  # type: ignore[arg-type]
    assert list(results) == ["ok", "fails", "slow", "refused"]
    assert (results["ok"].status, results["ok"].out, results["ok"].err) == (
        0,
        b"to stdin\n",
        b"err\n",
    )
    assert results["fails"].status == 3
    assert results["slow"].status is None and results["slow"].error == "no answer within 0.5 s"
    assert results["refused"].started is False
    assert results["refused"].error == "cannot start a command: refused"


def test_run_all_with_nothing_to_run() -> None:
    assert run_all({}, 1.0) == {}


def test_a_local_command_that_reads_nothing_yet_does_not_hold_up_its_start() -> None:
    # An agent's 100 KB behind a setup that hangs: a 64 KiB pipe blocked the start
    # until the setup ended, before its PID was read or a Ctrl-C could end it.
    began = time.monotonic()
    process = LOCAL.start("echo $$; exec sleep 30", b"x" * 200_000)
    took = time.monotonic() - began
    out = b""
    while not out.endswith(b"\n") and time.monotonic() - began < 10:
        out += process.read()[0]
        time.sleep(0.01)
    os.kill(int(out), signal.SIGKILL)
    process.close()
    assert took < 2
