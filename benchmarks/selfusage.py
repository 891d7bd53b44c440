"""``python -m benchmarks.selfusage OUT.json CLUSTERLAUNCH-ARGS...``: the controller's own costs.

Runs the ``clusterlaunch`` program (``script``, as its console script does: the
heap tuned, the imports' objects frozen out of the collector's way, no
interpreter teardown) in this process and, at its exit, writes what the
process itself used: CPU (``RUSAGE_SELF``, every thread, user and system, no
child), the CPU of the children it reaped (the OpenSSH transport's ssh
clients), and the most threads and open file descriptors seen (sampled every
20 ms by a thread of its own: its thread and fd are counted, its CPU, ~20 µs a
sample, is subtracted). wait4's rusage would add the children's CPU in; this
keeps the two apart.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import sys
import threading
import time


class Peaks:
    """The most threads and open fds of this process, sampled until stopped."""

    def __init__(self, every: float = 0.02) -> None:
        self.threads = 0
        self.fds = 0
        self.cpu_s = 0.0
        """This sampler's own CPU (not the controller's)."""
        self._every = every
        self._stop = threading.Event()
        threading.Thread(target=self._poll, name="selfusage", daemon=True).start()

    def _poll(self) -> None:
        while True:
            self.threads = max(self.threads, threading.active_count())
            with contextlib.suppress(OSError):
                self.fds = max(self.fds, len(os.listdir("/proc/self/fd")) - 1)
            self.cpu_s = time.thread_time()
            if self._stop.wait(self._every):
                return

    def stop(self) -> None:
        """Stop sampling."""
        self._stop.set()


def write_usage(path: str, peaks: Peaks) -> None:
    """The process's own usage so far, as JSON, to ``path``."""
    peaks.stop()
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {
        "cpu_s": own.ru_utime + own.ru_stime - peaks.cpu_s,
        "sampler_cpu_s": peaks.cpu_s,
        "user_s": own.ru_utime,
        "sys_s": own.ru_stime,
        "children_cpu_s": children.ru_utime + children.ru_stime,
        "peak_rss_kib": _vm_hwm_kib(),
        "peak_threads": peaks.threads,
        "peak_fds": peaks.fds,
    }
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(usage, handle)


def _vm_hwm_kib() -> int:
    """Peak RSS of this process's own memory (ru_maxrss carries the parent's over exec)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def main() -> None:
    """Run clusterlaunch with the arguments after the output path."""
    out, args = sys.argv[1], sys.argv[2:]
    peaks = Peaks()
    atexit.register(write_usage, out, peaks)
    from clusterlaunch.cli.main import script

    sys.argv[1:] = args
    script()  # runs the atexit handlers itself, then leaves without Python's teardown


if __name__ == "__main__":
    main()
