"""Ticks until stopped; its SIGTERM handler saves for 2 s, then says so: a checkpoint's last words.

``MARK_DIR``: the handler first creates ``MARK_DIR/rank-N`` (a test waits for it, to
signal the controller while the handler is still saving).
"""

import os
import signal
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()


def save(signum: int, frame: object) -> None:
    print(f"rank {rank} got SIGTERM, saving", flush=True)
    if os.environ.get("MARK_DIR"):
        open(os.path.join(os.environ["MARK_DIR"], f"rank-{rank}"), "w").close()
    time.sleep(2)
    print(f"rank {rank} saved, bye", flush=True)
    print(f"rank {rank} stderr after saving", file=sys.stderr, flush=True)
    os._exit(0)


signal.signal(signal.SIGTERM, save)
print(f"rank {rank} up", flush=True)
tick = 0
while True:
    time.sleep(0.5)
    tick += 1
    print(f"rank {rank} tick {tick}", flush=True)
