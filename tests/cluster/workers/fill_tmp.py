"""The last rank fills /tmp on its host, then prints until its writes fail; the others wait.

Run where that host's /tmp is a small tmpfs (``tests/cluster/test_rank_disk.py``): the
rank's stdout and stderr are torchrun's per-rank files in ``/tmp/clusterlaunch-UID``, so
once /tmp is full its lines and its traceback (``OSError: [Errno 28] No space left on
device``) are lost, as on a host whose /tmp fills during a long job.
"""

import os
import sys
import time

if int(os.environ["RANK"]) != int(os.environ["WORLD_SIZE"]) - 1:
    time.sleep(600)  # until the failing rank ends the job
    sys.exit(0)
with open("/tmp/filler", "wb", buffering=0) as filler:  # /tmp to its last block
    try:
        while filler.write(b"\0" * (1 << 20)):
            pass
    except OSError:
        pass
for number in range(2000):
    print(f"line {number} " + "x" * 70)
print("DONE", flush=True)
