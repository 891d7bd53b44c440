"""A job to restart: rank --fail-rank exits --code while CLUSTERLAUNCH_RESTART_COUNT is below
--fail-until (always, without it); every other rank, and every rank after that, sleeps
--sleep seconds (600) and exits 0.

No process group: each rank lives on its own, so a failure is that rank's alone.
"""

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=1)
parser.add_argument("--fail-until", type=int)
parser.add_argument("--code", type=int, default=7)
parser.add_argument("--sleep", type=float, default=600)
parser.add_argument("--touch", help="a file the failing rank creates before it fails")
parser.add_argument("--last-words", default="", help="what it prints, with no newline, then")
args = parser.parse_args()
count = int(os.environ.get("CLUSTERLAUNCH_RESTART_COUNT", "-1"))
rank = int(os.environ["RANK"])
world = os.environ["WORLD_SIZE"]
print(f"rank {rank} restart {count} world {world} up", flush=True)
if rank == args.fail_rank and (args.fail_until is None or count < args.fail_until):
    time.sleep(0.5)  # the others are up: the failure ends a running job
    if args.touch:
        open(args.touch, "w").close()
    print(args.last_words, end="", flush=True)  # no newline: as a crash may leave a line
    sys.stdout.flush()
    os._exit(args.code)
time.sleep(args.sleep)
