"""Counts the SIGTERMs it receives during a teardown: one line each in $COUNT_DIR/rank-N.

SIGTERM is blocked before torch starts a thread (a thread with it unblocked would
die of it) and taken with ``sigtimedwait``, one at a time, with who sent it. A
handler that is re-entered would cut a checkpoint's save short: the graceful
teardown promises one SIGTERM per process. After the first, the rank waits 2 s
for a second (the agent's and torchrun's came 1-3 ms apart), then exits 0;
``LINGER_S`` (default 2): how long it waits (a checkpoint that takes that long).
``FAIL_RANK``: that rank exits 3 once every rank counts, to set off a teardown.
"""

import os
import signal
import sys
import time

signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])

import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
rank = dist.get_rank()
log = open(os.path.join(os.environ["COUNT_DIR"], f"rank-{rank}"), "w", buffering=1)  # noqa: SIM115
dist.barrier()
print(f"rank {rank} counting", flush=True)
if str(rank) == os.environ.get("FAIL_RANK"):
    time.sleep(1)  # the others print "counting" and wait
    os._exit(3)
first = None
linger = float(os.environ.get("LINGER_S", "2"))
while first is None or time.monotonic() - first < linger:
    info = signal.sigtimedwait([signal.SIGTERM], 0.1)
    if info is not None:
        log.write(f"SIGTERM from pid {info.si_pid}\n")
        first = first or time.monotonic()
print(f"rank {rank} leaving after {first and 'a SIGTERM'}", flush=True)
sys.stdout.flush()
os._exit(0)
