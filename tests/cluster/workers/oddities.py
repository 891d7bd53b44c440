"""Output that is easy to mangle: \\r progress, half-written lines, split UTF-8."""

import os
import sys
import time

rank = os.environ["RANK"]
out = sys.stdout.buffer
out.write(f"bar{rank} 10%\rbar{rank} 50%\rbar{rank} 100%\n".encode())
out.flush()
out.write(f"half{rank}-".encode())
out.flush()
time.sleep(0.4)  # the agent polls the file meanwhile and sees half a line
out.write(b"done\n")
snow = "snow \u2603 \u65e5\u672c\n".encode()
out.write(snow[:7])  # split inside the 3-byte snowman
out.flush()
time.sleep(0.3)
out.write(snow[7:])
out.write(b"no newline at the end")
out.flush()
sys.stderr.write(f"stderr of {rank}\n")
sys.stderr.flush()
os._exit(0)
