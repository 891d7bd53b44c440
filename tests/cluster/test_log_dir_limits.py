"""``--log-dir`` under the controller's OS limits: a file it cannot write (``ulimit -f``), and
the open-file limit (``ulimit -n``) with a file per rank, across restarts.

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
    # 6 blocks of dash's 512 bytes: the header and node1's failure (~2.5 KB) fit, so the
    # job has failed before the teardown's torchrun lines (0.6-2.8 KB more: 12-33 lines
    # seen) outgrow the file. With 1 block, node1's failure itself outgrew it before the
    # controller heard of it: a log lost while the job runs stops it (exit 1), as documented.
    limit = _limited("-f 6")
    result = run_cli("run", sim_cluster, *_job(tmp_path, "sys.exit(3)"), prefix=limit)
    assert result.returncode == 3, result.stderr[-3000:]
    lost = f"clusterlaunch: the logs are incomplete: cannot write {logs}/controller.log"
    said = result.stderr.splitlines()
    incomplete = [line for line in said if "incomplete" in line]
    assert incomplete == [f"{lost} (File too large)"], result.stderr
    summary = said.index("clusterlaunch: job failed: rank 1 on node1 exited with code 3")
    assert said.index(incomplete[0]) == summary - 1, result.stderr
    hid = [line for line in said if line.startswith("clusterlaunch: hid ")]
    assert all(line.endswith("(in controller.log)") for line in hid), hid  # each one is
    # The teardown's lines from the line controller.log could not take on: shown, not hidden.
    shown = [line for line in said if line.startswith(("[node0]", "[node2]"))]
    assert shown, result.stderr
    for rank in (0, 2):
        said = (logs / f"rank-{rank}.log").read_text()
        assert said == f"early line from rank {rank}\nrank {rank} got SIGTERM, saving\n"


def test_a_controller_log_given_up_in_an_attempt_is_no_restart_without_it(
    sim_cluster, tmp_path: Path
) -> None:
    """As above, with a restart to come: controller.log still cannot be written, so the
    restart does not start. It ran, with controller.log missing all of its lines, and
    the loss said only once, at the end of the attempt before."""
    logs = tmp_path / "logs"
    restart = ("--max-restarts", "1", "--restart-backoff", "0.1")
    result = run_cli("run", sim_cluster, *restart, *_job(tmp_path, "sys.exit(3)"),
                     prefix=_limited("-f 6"))  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    said = result.stderr.splitlines()
    incomplete = [line for line in said if "incomplete" in line]
    assert incomplete == [f"clusterlaunch: the logs are incomplete: cannot write {logs}/"
                          "controller.log (File too large)"], result.stderr  # fmt: skip
    assert said[-1] == (
        f"clusterlaunch: job failed: restart 1: --log-dir {logs}: controller.log still "
        "cannot be written (File too large)"
    ), result.stderr
    assert not list(logs.glob("rank-*.attempt-2.log"))  # nothing of attempt 2 started


ECHO = '#!/bin/sh\necho "rank $RANK"\n'


def _program(tmp_path: Path, text: str) -> Path:
    program = tmp_path / "program.sh"
    program.write_text(text)
    program.chmod(0o755)
    return program


def test_many_ranks_raise_the_open_file_limit_for_their_log_files(
    sim_cluster, tmp_path: Path
) -> None:
    """78 ranks, one open file each, under a soft limit of 82: the budget counted hosts
    only, and the 78th file failed (Too many open files). The soft limit is raised."""
    program = _program(tmp_path, ECHO)
    hosts = write_hosts(tmp_path / "hosts.yaml", [(f"node{n}", 26) for n in range(3)])
    logs = tmp_path / "logs"
    argv = ("--log-dir", str(logs), "--no-python", str(hosts), str(program))
    result = run_cli("run", sim_cluster, *argv, prefix=_limited("-Sn 82"))
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(78):
        assert (logs / f"rank-{rank}.log").read_text() == f"rank {rank}\n"


def test_too_low_a_hard_limit_for_the_log_files_is_one_line(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [(f"node{n}", 26) for n in range(3)])
    logs = tmp_path / "logs"
    argv = ("--log-dir", str(logs), "--no-python", str(hosts), str(_program(tmp_path, ECHO)))
    result = run_cli("run", sim_cluster, *argv, prefix=_limited("-n 90"))
    assert result.returncode == 2
    assert result.stderr == (
        "clusterlaunch: error: 3 hosts and 79 --log-dir files need up to 161 open files, and "
        "this shell allows 90 (ulimit -Hn); raise the hard limit (limits.conf nofile) or "
        "launch on fewer hosts or ranks, or no --log-dir\n"
    )
    assert not logs.exists()  # checked before anything was made or contacted


def test_each_attempts_log_files_are_closed_when_it_ends(sim_cluster, tmp_path: Path) -> None:
    """26 ranks fail 4 times under a hard limit of 110 open files: one attempt's files fit,
    but every attempt's stayed open, and attempt 4's could not be made (Too many open
    files): the job ended with a restart left."""
    program = _program(tmp_path, ECHO + '[ "$RANK" = 0 ] && exit 3\nsleep 5\n')
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 13), ("node1", 13)])
    logs = tmp_path / "logs"
    argv = ("--max-restarts", "3", "--restart-backoff", "0.1", "--log-dir", str(logs))
    argv += ("--no-python", str(hosts), str(program))
    result = run_cli("run", sim_cluster, *argv, prefix=_limited("-n 110"), timeout=300)
    assert result.returncode == 3, result.stderr[-3000:]
    assert "restart 3 of 3" in result.stderr and "Too many open files" not in result.stderr
    for name in ("rank-0.log", *(f"rank-0.attempt-{n}.log" for n in (2, 3, 4))):
        assert (logs / name).read_text() == "rank 0\n"
