"""``--log-dir`` keeps every byte the ranks write, whatever happens to the console.

Real sshd hosts and torchrun: the frames reach the controller as a real agent sends them.
"""

from __future__ import annotations

import errno
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests import mountns
from tests.cluster.support import start_cli, wait_for_lines, write_hosts

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


BURST = 2000
BURSTING = f"""\
import os, signal, sys, time
rank = int(os.environ["RANK"])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # every line is written, whatever stops the job
open(os.path.join(sys.argv[1], str(rank)), "w").close()
while len(os.listdir(sys.argv[1])) < 3:  # every rank runs before the first line is shown
    time.sleep(0.01)
for i in range({BURST}):
    print(f"out {{rank}} {{i}}")
    print(f"err {{rank}} {{i}}", file=sys.stderr)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_amid_a_read_loses_nothing_in_the_log_files(
    sim_cluster, tmp_path: Path, signum: int
) -> None:
    """A signal right after the controller's first line of ranks that print 2,000 lines
    fast: the frames of the read it came amid that were not routed yet were lost from
    every file (rank-2.log began at its line 815)."""
    script = tmp_path / "burst.py"
    script.write_text(BURSTING)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2)])
    logs, ready = tmp_path / "logs", tmp_path / "ready"
    ready.mkdir()
    argv = ("--log-dir", str(logs), str(hosts), str(script), str(ready))
    proc = start_cli("run", sim_cluster, *argv)
    try:
        wait_for_lines(proc, b"] out ", 1, timeout=90)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err.decode()
    for rank in range(3):
        logged = (logs / f"rank-{rank}.log").read_text().splitlines()
        for stream in ("out", "err"):
            mine = [line for line in logged if line.startswith(f"{stream} ")]
            assert mine == [f"{stream} {rank} {i}" for i in range(BURST)], (rank, stream, mine[:1])


# Attempt 1: rank 1 fails; rank 0, stopped, waits while the test fills the disk, writes a
# line of its torchrun's that controller.log cannot take, and waits for the disk to be
# freed. Attempt 2 succeeds.
FULL_THEN_FREED = """\
import os, signal, sys, time
gates, rank = sys.argv[1], int(os.environ["RANK"])
if os.environ["CLUSTERLAUNCH_RESTART_COUNT"] != "0":
    print(f"attempt 2 rank {rank}", flush=True)
    sys.exit(0)
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))


def wait_for(name):
    while not os.path.exists(os.path.join(gates, name)):
        time.sleep(0.05)


open(os.path.join(gates, f"ready{rank}"), "w").close()
wait_for("ready0")
wait_for("ready1")
if rank == 1:
    sys.exit(3)
while not stopping:
    time.sleep(0.05)
open(os.path.join(gates, "stopping"), "w").close()
wait_for("full")
with open(f"/proc/{os.getppid()}/fd/2", "w") as torchrun:  # more than the page left
    torchrun.write("MARK " + "x" * 5000 + "\\n")
wait_for("freed")
"""


def _on_a_small_disk(disk: Path) -> list[str]:
    """An argv prefix: the command sees a 256 KiB tmpfs at ``disk`` (a mount namespace of its
    own); what it leaves in ``disk/logs`` is copied to ``disk.kept`` when it ends."""
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    script = (
        'mount -t tmpfs -o size=256k tmpfs "$0" && '
        '{ "$@"; status=$?; cp -R "$0/logs" "$0.kept"; exit $status; }'
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(disk)]


def _fill(disk: Path) -> None:
    """Write into ``disk`` until it is full."""
    with open(disk / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_a_controller_log_given_up_is_written_again_by_the_restart(
    sim_cluster, tmp_path: Path
) -> None:
    """controller.log's disk is full in attempt 1's teardown, and has room again before the
    restart: the restart writes it again, from a line that says lines are missing, and says
    so. It ran on with controller.log given up: none of the restart's lines were in it, and
    the loss was said once, at the end of attempt 1."""
    script = tmp_path / "job.py"
    script.write_text(FULL_THEN_FREED)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    gates, disk = tmp_path / "gates", tmp_path / "disk"
    gates.mkdir()
    disk.mkdir()
    logs = disk / "logs"
    argv = ("--max-restarts", "1", "--restart-backoff", "0.1", "--log-dir", str(logs))
    argv += (str(hosts), str(script), str(gates))
    proc = start_cli("run", sim_cluster, *argv, prefix=_on_a_small_disk(disk))
    assert proc.stdout is not None and proc.stderr is not None
    try:
        _wait_for(gates / "stopping", proc)
        seen = Path(f"/proc/{proc.pid}/root") / disk.relative_to("/")  # its tmpfs
        _fill(seen)
        (gates / "full").touch()
        said = [proc.stderr.readline()]
        while not said[-1].startswith(b"[node0]") or b"MARK" not in said[-1]:
            assert said[-1], b"".join(said)
            said.append(proc.stderr.readline())
        (seen / "filler").unlink()
        (gates / "freed").touch()
        out, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    err = (b"".join(said) + rest).decode()
    assert proc.returncode == 0, err
    problem = f"cannot write {logs}/controller.log (No space left on device)"
    assert err.count("the logs are incomplete") == 1, err
    assert f"clusterlaunch: the logs are incomplete: {problem}\n" in err, err
    again = f"clusterlaunch: restart 1: {logs}/controller.log is written again; lines of "
    assert f"{again}attempt 1 are missing\n" in err, err
    kept = (tmp_path / "disk.kept" / "controller.log").read_text()
    gap = re.search(
        rf"(?m)^[0-9T:-]+ clusterlaunch: lines are missing here: {re.escape(problem)}$", kept
    )
    assert gap is not None, kept[-3000:]  # a line of its own, after the one cut short
    after = kept[gap.start() :]
    for line in (again, "attempt 1 failed (rank 1 on node1 exited with code 3); restart 1",
                 "clusterlaunch: job succeeded in attempt 2 (after 1 restart(s))"):  # fmt: skip
        assert line in after, kept[-3000:]
    assert out.decode().count("attempt 2 rank") == 2


def _wait_for(path: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, path
        time.sleep(0.05)
