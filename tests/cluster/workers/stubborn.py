"""Ignores SIGTERM once up: only SIGKILL ends it (tests escalation)."""

import signal
import time

import torch.distributed as dist

dist.init_process_group("gloo")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"rank {dist.get_rank()} up", flush=True)
time.sleep(600)
