"""The program's heap keeps streaming's large buffers (cli/heap.py), where glibc allows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from clusterlaunch.cli import heap

# Stream-like churn in a fresh interpreter: a 1.1 MiB block read and its prefixed
# copy made, then both freed; 3 blocks to warm up, then 10 counted, on a thread (whose
# heap glibc keeps apart) and on the main thread, minor page faults counted per
# thread; as glibc comes, then tuned. 10 blocks show what 200 did, in 0.3 s, not 2.3.
CHURN = """
import json, resource, threading
from clusterlaunch.cli.heap import tune_heap
block = b"12345678\\n" * (1 << 17)
def stream(faults):
    for count in (3, 10):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        for _ in range(count):
            piece = bytes(bytearray(block))
            out = piece.replace(b"\\n", b"\\n[node0] ")
            del piece, out
    faults.append((resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before) // 10)
def faults_per_block():
    faults = []
    thread = threading.Thread(target=stream, args=(faults,))
    thread.start()
    thread.join()
    stream(faults)
    return faults
plain = faults_per_block()
tuned = tune_heap()
print(json.dumps([plain, tuned, faults_per_block()]))
"""


@pytest.mark.skipif(not heap.is_glibc(), reason="mallopt is glibc's")
def test_tuned_heap_stops_paging_in_every_new_buffer() -> None:
    # Measured: 1,088 minor page faults per block as glibc comes (either thread), 0
    # tuned: each 3.4 MB of buffers was new pages, zeroed by the kernel, every time.
    result = subprocess.run(
        [sys.executable, "-c", CHURN], capture_output=True, text=True, check=True
    )
    plain, tuned, tuned_faults = json.loads(result.stdout)
    assert tuned is True
    assert min(plain) > 500
    assert max(tuned_faults) < 50


def test_without_glibc_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown(name: str) -> str:
        raise ValueError(f"unrecognized configuration name {name!r}")  # macOS, for one

    monkeypatch.setattr(os, "confstr", unknown)
    assert heap.is_glibc() is False
    assert heap.tune_heap() is False
