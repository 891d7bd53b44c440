"""All-reduce of rank+1 across the job; prints what each rank saw.

Env FAIL_RANK/FAIL_CODE: that rank exits with FAIL_CODE after the collective;
FAIL_RANK/FAIL_SIGNAL: it kills itself with that signal (9: as the OOM killer does).
"""

import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from _common import finish

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(
    "RANK={} LOCAL_RANK={} WORLD_SIZE={} LOCAL_WORLD_SIZE={} SUM={} ARGV={}".format(
        rank,
        os.environ["LOCAL_RANK"],
        dist.get_world_size(),
        os.environ["LOCAL_WORLD_SIZE"],
        int(value.item()),
        json.dumps(sys.argv[1:]),
    ),
    flush=True,
)
failing = os.environ.get("FAIL_RANK") == str(rank)
code = int(os.environ.get("FAIL_CODE", "0")) if failing else 0
if code:
    sys.stdout.flush()
    os._exit(code)
if failing and os.environ.get("FAIL_SIGNAL"):
    sys.stdout.flush()
    os.kill(os.getpid(), signal.Signals(int(os.environ["FAIL_SIGNAL"])))
finish()
