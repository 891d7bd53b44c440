"""``--log-dir`` under the controller's OS limits: a file it cannot write (``ulimit -f``).

Real sshd hosts, so the limits are the controller's alone (set by a shell in front of it):
the ranks' processes, started by the hosts' sshd, write as usual. The controller writes
no bytecode meanwhile: ``ulimit -f`` would leave a truncated ``.pyc`` behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

SIGTERM_LAST_WORDS = """\
import os, signal, sys, time
rank = int(os.environ["RANK"])
stopping = []
signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
print(f"early line from rank {rank}", flush=True)
open(os.path.join(sys.argv[1], str(rank)), "w").close()  # ready for SIGTERM
if rank == 1:
    while len(os.listdir(sys.argv[1])) < 3:
        time.sleep(0.1)
    ACTION
while not stopping:
    time.sleep(0.1)
print(f"rank {rank} got SIGTERM, saving", flush=True)
"""
BIG = 'for i in range(2000): print(f"big line {i} " + "x" * 60, flush=True)'


def _limited(*limits: str) -> list[str]:
    """The argv prefix that runs the controller under ``ulimit LIMIT`` for each limit."""
    shell = " && ".join(f"ulimit {limit}" for limit in limits)
    return ["env", "PYTHONDONTWRITEBYTECODE=1", "sh", "-c", f'{shell} && exec "$@"', "sh"]


def _job(tmp_path: Path, action: str) -> list[str]:
    """Rank 1's ``action`` once every rank is ready for SIGTERM, which each answers with
    its last line: ``run``'s arguments, with ``--log-dir`` ``tmp_path/logs``."""
    script = tmp_path / "job.py"
    script.write_text(SIGTERM_LAST_WORDS.replace("ACTION", action))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    (tmp_path / "ready").mkdir()
    logs = ["--grace", "10", "--log-dir", str(tmp_path / "logs")]
    return [*logs, str(hosts), str(script), str(tmp_path / "ready")]


def test_a_log_file_too_large_is_given_up_alone(sim_cluster, tmp_path: Path) -> None:
    """Rank 1 writes more than ``ulimit -f`` lets its file hold: the job stops, as
    documented. Rank 1's lines all still reached the console (the failed log write came
    first and skipped it), and the other files still got what the ranks wrote meanwhile
    (every file was given up at the first failure)."""
    logs = tmp_path / "logs"
    result = run_cli("run", sim_cluster, *_job(tmp_path, BIG), prefix=_limited("-f 64"))
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"job stopped: cannot write {logs}/rank-1.log (File too large)" in result.stderr
    shown = [line for line in result.stdout.splitlines() if line.startswith("[r1 node1:0] big")]
    assert len(shown) == 2000, result.stdout[-2000:]
    for rank in (0, 2):
        said = (logs / f"rank-{rank}.log").read_text()
        assert said == f"early line from rank {rank}\nrank {rank} got SIGTERM, saving\n"
    logged = (logs / "controller.log").read_text()
    assert logged.endswith(f" clusterlaunch: job stopped: cannot write {logs}/rank-1.log "
                           "(File too large)\n"), logged[-500:]  # fmt: skip
    hid = re.search(r"hid (\d+) line\(s\) of torchrun shutdown output \((.*)\)", result.stderr)
    if hid is not None:  # as many as torchrun printed before its host ended
        assert hid[2] == "in controller.log"
        assert len(re.findall(r"(?m)^\[node\d\] ", logged)) >= int(hid[1])
    assert "the logs are incomplete" not in result.stderr


def test_a_controller_log_that_fails_is_said_and_hides_nothing(sim_cluster, tmp_path: Path) -> None:
    """controller.log outgrows ``ulimit -f`` with torchrun's own lines when rank 1 fails.
    The failure stays the job's outcome; the lost log is said once, before it; and the
    shutdown output kept off the console is not said to be in controller.log (it was,
    while controller.log had lost it, and the loss itself went unsaid)."""
    logs = tmp_path / "logs"
    result = run_cli("run", sim_cluster, *_job(tmp_path, "sys.exit(3)"), prefix=_limited("-f 1"))
    assert result.returncode == 3, result.stderr[-3000:]
    lost = f"clusterlaunch: the logs are incomplete: cannot write {logs}/controller.log"
    said = result.stderr.splitlines()
    incomplete = [line for line in said if "incomplete" in line]
    assert incomplete == [f"{lost} (File too large)"], result.stderr
    summary = said.index("clusterlaunch: job failed: rank 1 on node1 exited with code 3")
    assert said.index(incomplete[0]) == summary - 1, result.stderr
    for line in said:
        if line.startswith("clusterlaunch: hid "):
            assert line.endswith("(not all in controller.log: it could not be written)")
    for rank in (0, 2):
        said = (logs / f"rank-{rank}.log").read_text()
        assert said == f"early line from rank {rank}\nrank {rank} got SIGTERM, saving\n"
