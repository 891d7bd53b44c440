"""Ranks that deadlock in a collective: rank 0 waits in all_reduce, the others in recv.

Each rank prints ``BLOCKING rank=N`` first, then nothing ever again (the gloo
timeout is an hour), so ``clusterlaunch stacks`` and ``run --stall-timeout``
have a real stuck job to look at.
"""

import datetime

import torch
import torch.distributed as dist

torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(hours=1))
rank = dist.get_rank()
tensor = torch.zeros(4)
print(f"BLOCKING rank={rank}", flush=True)


def wait_in_all_reduce() -> None:
    dist.all_reduce(tensor)  # the others never join it


def wait_in_recv() -> None:
    dist.recv(tensor, src=0)  # rank 0 never sends


if rank == 0:
    wait_in_all_reduce()
else:
    wait_in_recv()
