"""Teardown benchmark: every rank sleeps, except BENCH_FAIL_RANK, which exits 1.

Each rank touches ``up-<rank>`` in BENCH_READY_DIR; the failing rank waits
until all WORLD_SIZE ranks are up, writes ``time.time()`` to BENCH_FAIL_FILE
(atomically, by rename) right before it exits. Stdlib only: no process group,
so only the launcher's own work is timed.
"""

import os
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
ready = os.environ["BENCH_READY_DIR"]
open(os.path.join(ready, f"up-{rank}"), "w").close()
if rank == int(os.environ["BENCH_FAIL_RANK"]):
    deadline = time.monotonic() + 120
    while len(os.listdir(ready)) < world and time.monotonic() < deadline:
        time.sleep(0.005)
    path = os.environ["BENCH_FAIL_FILE"]
    with open(path + ".tmp", "w") as handle:
        handle.write(repr(time.time()))
    os.rename(path + ".tmp", path)
    os._exit(1)
time.sleep(600)
