"""Timed subprocesses for the benchmarks: spawn, reap with rusage, peak RSS, a time limit.

Every command is timed from just before it is spawned to when it has been
reaped, so Python start-up and imports count, as they do for a user.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


class BenchError(RuntimeError):
    """A benchmark could not run as designed (not a missed target)."""


@dataclass
class Timed:
    """A finished command: wall seconds, exit status, output, and its own peak RSS."""

    argv: Sequence[str]
    seconds: float
    returncode: int
    stdout: bytes
    stderr: bytes
    peak_rss_kib: int
    """Peak RSS of the command's own process (VmHWM of its memory after exec), in KiB."""
    cpu_s: float = 0.0
    """User + system CPU of this process and the children it reaped (local side only)."""

    def check(self, expect: int = 0) -> Timed:
        """Raise :class:`BenchError` unless it exited with ``expect``."""
        if self.returncode != expect:
            tail = self.stderr.decode("utf-8", "replace")[-1500:]
            raise BenchError(
                f"{shlex.join(self.argv)} exited {self.returncode} (expected {expect}):\n{tail}"
            )
        return self


def reap(process: subprocess.Popen[bytes]) -> int:
    """Wait for ``process`` with wait4; its exit status as Popen reports it."""
    return reap_usage(process)[0]


def reap_usage(process: subprocess.Popen[bytes]) -> tuple[int, Any]:
    """Wait for ``process`` with wait4: (exit status as Popen reports it, its rusage).

    Popen's own wait() discards the child's resource usage; wait4 returns the
    CPU time of this one child (and of its own reaped children), not of every
    child this harness ever had, as RUSAGE_CHILDREN would. Its ``ru_maxrss`` is
    no measure of the child's memory, though: Linux carries the high-water RSS
    of the memory a process had before exec into it, and a child spawned from
    this harness starts from the harness's (see :class:`PeakRss`).
    """
    while True:
        try:
            _, status, usage = os.wait4(process.pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code  # Popen must not wait again
    return code, usage


def run_timed(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdout: Any = subprocess.DEVNULL,
    timeout: float = 300.0,
) -> Timed:
    """Run ``argv`` to completion in ``cwd``, timing it (see :meth:`Bench.run`)."""
    out_chunks: list[bytes] = []
    err_chunks: list[bytes] = []
    began = time.perf_counter()
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )
    peak = PeakRss(process, argv, every=0.005)
    readers = [drain(process.stderr, err_chunks)]
    if stdout is subprocess.PIPE:
        readers.append(drain(process.stdout, out_chunks))
    timer = threading.Timer(timeout, kill_quietly, (process,))
    timer.start()
    try:
        code, usage = reap_usage(process)
    finally:
        timer.cancel()
        peak_kib = peak.stop()
    elapsed = time.perf_counter() - began
    for reader in readers:
        reader.join()
    if code == -9 and elapsed >= timeout:
        raise BenchError(f"{shlex.join(argv)}: no result within {timeout:g} s (killed)")
    return Timed(
        argv,
        elapsed,
        code,
        b"".join(out_chunks),
        b"".join(err_chunks),
        peak_kib,
        usage.ru_utime + usage.ru_stime,
    )


class PeakRss:
    """Polls a child's VmHWM (the peak RSS of its own memory) until it exits.

    VmHWM starts afresh at exec, so it covers the command alone; reads taken
    before the exec (when /proc/PID/cmdline is still this harness's) are
    ignored. A peak reached in the last poll interval before exit would be
    missed; memory peaks during connection and streaming, long before.
    """

    def __init__(self, process: subprocess.Popen[bytes], argv: Sequence[str], every: float):
        self._process = process
        self._cmdline = b"\0".join(os.fsencode(a) for a in argv) + b"\0"
        self._every = every
        self._stop = threading.Event()
        self.kib = 0
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        pid = self._process.pid
        # VmHWM only grows, so a late read still holds an early peak; what polling every
        # 5 ms cost (33 us of CPU a poll here, 0.7% of a core) stays in the short
        # commands. After 0.5 s every 50 ms: a torch job competes with it for 2 cores.
        slow_after = time.monotonic() + 0.5
        while self._process.returncode is None:  # not reaped: the PID is still its own
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    cmdline = handle.read()
                with open(f"/proc/{pid}/status", "rb") as handle:
                    status = handle.read()
            except OSError:
                return
            found = re.search(rb"^VmHWM:\s+(\d+) kB", status, re.M)
            if cmdline == self._cmdline and found:
                self.kib = max(self.kib, int(found[1]))
            if self._stop.wait(self._every if time.monotonic() < slow_after else self._every * 10):
                return

    def stop(self) -> int:
        """Stop polling; the peak seen, in KiB (0 if never seen after exec)."""
        self._stop.set()
        self._thread.join()
        return self.kib


def drain(stream: IO[bytes] | None, into: list[bytes]) -> threading.Thread:
    """A thread that reads ``stream`` to its end into ``into``."""

    def read() -> None:
        assert stream is not None
        with stream:
            while chunk := stream.read(1 << 16):
                into.append(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def kill_quietly(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process`` unless it was reaped."""
    # os.kill, not process.kill(): that polls, and could reap the child under reap()'s wait4.
    # The PID cannot have been reused: the child is not reaped while returncode is None.
    with contextlib.suppress(ProcessLookupError):
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
