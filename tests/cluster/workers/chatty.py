"""Writes MB MiB to stdout, then says on stderr how much disk its rank folder holds once the
agent has read and sent it all: torchrun's per-rank files, emptied behind the agent's reads.

The folder is torchrun's ``--log-dir`` (the agent's, in ``/tmp/clusterlaunch-UID``): this
rank's stdout is ``DIR/RUN/attempt_N/LOCAL_RANK/stdout.log`` in it.
"""

import os
import sys
import time

LIMIT = 1 << 20


def held(folder: str) -> int:
    """What ``du`` counts: the blocks the folder's files take on disk."""
    return sum(
        os.stat(os.path.join(root, name)).st_blocks * 512
        for root, _, names in os.walk(folder)
        for name in names
    )


line = b"y" * 1023 + b"\n"
for _ in range((int(sys.argv[1]) << 20) // len(line)):
    sys.stdout.buffer.write(line)
sys.stdout.flush()
folder = os.readlink("/proc/self/fd/1")
for _ in range(4):
    folder = os.path.dirname(folder)
deadline = time.monotonic() + 60  # the agent sends it all long before (or never frees it)
while held(folder) > LIMIT and time.monotonic() < deadline:
    time.sleep(0.05)
print(f"rank folder holds {held(folder)} bytes", file=sys.stderr, flush=True)
