"""Says it is up, is silent for ``QUIET_S`` seconds (a stall), then prints a tick twice a second.

No process group: nothing to wait for, so the silence is the script's own.
"""

import os
import time

QUIET_S = 4.0
rank = int(os.environ["RANK"])
print(f"rank {rank} up", flush=True)
time.sleep(QUIET_S)
for tick in range(600):
    print(f"rank {rank} tick {tick}", flush=True)
    time.sleep(0.5)
