"""Controller-SIGKILL benchmark: each rank says it is up, then sleeps.

With BENCH_STUBBORN=1 it ignores SIGTERM first, so only the agent's SIGKILL
after --grace can end it (the slow path of teardown).
"""

import os
import signal
import time

if os.environ.get("BENCH_STUBBORN") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"rank {os.environ['RANK']} up", flush=True)
time.sleep(600)
