"""``--log-dir`` keeps every byte the ranks write, whatever happens to the console.

Real sshd hosts and torchrun: the frames reach the controller as a real agent sends them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.support import start_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

LINES = 500
BOTH_STREAMS = f"""\
import os, signal, sys, time
rank = int(os.environ["RANK"])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the other rank's output stops the job
open(os.path.join(sys.argv[1], str(rank)), "w").close()
while len(os.listdir(sys.argv[1])) < 2:  # both ranks write, whoever is first shown
    time.sleep(0.01)
# One write each: the agent's next look at the rank files finds both, and sends their
# frames together (stdout's first), in one read of the controller's.
os.write(2, "".join(f"err {{rank}} {{i}}\\n" for i in range({LINES})).encode())
os.write(1, "".join(f"out {{rank}} {{i}}\\n" for i in range({LINES})).encode())
"""


def test_a_console_that_fails_mid_read_loses_nothing_in_the_log_files(
    sim_cluster, tmp_path: Path
) -> None:
    """stdout is ``/dev/full``: the first rank line shown fails, with the rank's stderr in
    the same read. That frame, and every later one of the read, reached no file: the stop
    went out of the read loop at once."""
    script = tmp_path / "both.py"
    script.write_text(BOTH_STREAMS)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2)])
    logs = tmp_path / "logs"
    (tmp_path / "ready").mkdir()
    argv = ("--log-dir", str(logs), str(hosts), str(script), str(tmp_path / "ready"))
    with open("/dev/full", "wb") as full:
        proc = start_cli("run", sim_cluster, *argv, stdout=full.fileno())
        _, err = proc.communicate(timeout=120)
    said = err.decode()
    assert proc.returncode == 1, said
    assert "job stopped: cannot write stdout: No space left on device" in said, said
    for rank in range(2):
        logged = (logs / f"rank-{rank}.log").read_text().splitlines()
        for stream in ("out", "err"):
            mine = [line for line in logged if line.startswith(f"{stream} ")]
            assert mine == [f"{stream} {rank} {i}" for i in range(LINES)], (rank, stream)
