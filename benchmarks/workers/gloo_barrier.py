"""The smallest real gloo job: join, barrier, leave cleanly (overhead benchmark).

barrier + destroy_process_group + os._exit: plain gloo scripts sometimes abort
at interpreter exit, and the peer then waits in torchrun's exit barrier.
"""

import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)
