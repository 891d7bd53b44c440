"""The program's heap keeps streaming's large buffers (cli/heap.py), where glibc allows it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clusterlaunch.cli import heap

# Stream-like churn in a fresh interpreter: a 1.1 MiB block read, its prefixed copy
# made, both freed, 200 times (half on a thread, whose heap glibc keeps apart).
CHURN = """
import resource, sys, threading
from clusterlaunch.cli.heap import tune_heap
tuned = tune_heap() if sys.argv[1] == "tuned" else False
block = b"12345678\\n" * (1 << 17)
def stream(n):
    for _ in range(n):
        piece = bytes(bytearray(block))
        out = piece.replace(b"\\n", b"\\n[node0] ")
        del piece, out
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
thread = threading.Thread(target=stream, args=(100,))
thread.start()
thread.join()
stream(100)
print(tuned, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 200)
"""


def _faults_per_block(mode: str) -> tuple[str, int]:
    result = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, check=True
    )
    tuned, faults = result.stdout.split()
    return tuned, int(faults)


@pytest.mark.skipif(not heap.is_glibc(), reason="mallopt is glibc's")
def test_tuned_heap_stops_paging_in_every_new_buffer() -> None:
    # Measured: 1,088 minor page faults per block as glibc comes, 11 tuned: each
    # 3.4 MB of buffers was new pages, zeroed by the kernel, every time.
    plain, plain_faults = _faults_per_block("plain")
    tuned, tuned_faults = _faults_per_block("tuned")
    assert (plain, tuned) == ("False", "True")
    assert plain_faults > 500
    assert tuned_faults < 50


def test_without_glibc_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(name: str) -> str:
        raise ValueError(f"unrecognized configuration name {name!r}")  # macOS, for one

    monkeypatch.setattr(os, "confstr", unknown)
    assert heap.is_glibc() is False
    assert heap.tune_heap() is False
