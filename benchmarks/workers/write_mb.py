"""Writes MB MiB of 1 KiB lines to stdout, at RATE MiB/s if given, else as fast as it can
(``benchmarks/rank_files.py``)."""

import sys
import time

line = b"y" * 1023 + b"\n"
rate = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
began = time.monotonic()
for mib in range(int(sys.argv[1])):
    sys.stdout.buffer.write(line * 1024)
    sys.stdout.flush()
    if rate:
        time.sleep(max(0.0, began + (mib + 1) / rate - time.monotonic()))
