"""Joins the job, says it is up, then sleeps: a job to interrupt."""

import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} up", flush=True)
time.sleep(600)
