"""A rank that writes to /dev/stdout or /dev/stderr: every line it wrote once the agent had
read the ones before arrives, in order, with no NUL bytes, on the console and in its log.

A rank's stdout and stderr are files on its host (torchrun's ``--redirects 3``); opening
``/dev/stderr`` opens that same file again and empties it. Before, the lines written
through the new open file were lost behind the agent's offset, and the rank's next write
through its own descriptor left a gap of NULs that reached the console, ``rank-N.log`` and
the summary (``\\x00\\x00giving up``). Each rank waits for a file the test creates once the
console shows the lines before, so the agent has read them when the rank rewrites its file
(what it had not read by then is gone, and a line longer than what the file held, which the
rank's next write through its own descriptor cuts: docs/troubleshooting.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.support import start_cli, stderr_until, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

SHELL = """#!/bin/sh
echo "rank $RANK: loading data" >&2
echo "rank $RANK: step 1 done" >&2
if [ "$RANK" = 1 ]; then
  while [ ! -e "$GO.1" ]; do sleep 0.05; done
  echo "ERROR: /data/shard-1 missing on rank $RANK" > /dev/stderr
  echo "giving up" >&2
  exit 3
fi
exec sleep 60
"""

PYTHON = """import os, sys, time
rank = os.environ["RANK"]
def wait_for(step):
    while not os.path.exists("%s.%d" % (os.environ["GO"], step)):
        time.sleep(0.05)
print("rank %s: started, loading the data set" % rank)
if rank == "1":
    wait_for(1)
    with open("/dev/stdout", "w") as out:
        out.write("rank 1: through /dev/stdout\\n")
    print("rank 1: after /dev/stdout")
    print("rank 1: a warning: the learning rate is high", file=sys.stderr)
    wait_for(2)
    with open("/dev/stderr", "w") as err:
        err.write("rank 1: via /dev/stderr\\n")
    print("rank 1: after /dev/stderr", file=sys.stderr)
wait_for(2)
"""


def start(sim_cluster, tmp_path: Path, program: str, *options: str):
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    go = tmp_path / "go"
    args = ("--log-dir", str(tmp_path / "logs"), "--env", f"GO={go}", str(hosts), program)
    return start_cli("run", sim_cluster, "--grace", "2", *options, *args), go


def r1_lines(text: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in text.splitlines() if line.startswith("[r1 ")]


def test_a_shell_rank_writing_to_dev_stderr(sim_cluster, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SHELL)
    script.chmod(0o755)
    process, go = start(sim_cluster, tmp_path, str(script), "--no-python")
    try:
        early = stderr_until(process, "rank 1: step 1 done")
        go.with_name("go.1").touch()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = early + err.decode()
    assert process.returncode == 3, text[-3000:]
    lines = ["rank 1: loading data", "rank 1: step 1 done"]
    lines += ["ERROR: /data/shard-1 missing on rank 1", "giving up"]
    assert r1_lines(text) == lines, text[-3000:]
    log = (tmp_path / "logs" / "rank-1.log").read_bytes()
    assert log.decode().splitlines() == lines
    assert b"\0" not in out + err + log
    assert "node1: rank 1 opened /dev/stderr for writing" in text, text[-3000:]
    assert "write to >&2 in a shell, sys.stderr in Python, not to /dev/stderr" in text
    assert text.split("last ")[-1].count("giving up") == 1  # the summary's last lines


def test_a_python_rank_opening_dev_stdout_and_dev_stderr(sim_cluster, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PYTHON)
    process, go = start(sim_cluster, tmp_path, str(script))
    try:
        early = wait_for_lines(process, b"rank 1: started", 1, timeout=120)
        go.with_name("go.1").touch()
        early_err = stderr_until(process, "rank 1: a warning")
        go.with_name("go.2").touch()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    stdout, stderr = b"".join(early).decode() + out.decode(), early_err + err.decode()
    assert process.returncode == 0, stderr[-3000:]
    shown = ["rank 1: started, loading the data set", "rank 1: through /dev/stdout"]
    shown += ["rank 1: after /dev/stdout"]
    said = [
        "rank 1: a warning: the learning rate is high",
        "rank 1: via /dev/stderr",
        "rank 1: after /dev/stderr",
    ]
    assert r1_lines(stdout) == shown, stdout
    assert r1_lines(stderr) == said, stderr[-3000:]
    log = (tmp_path / "logs" / "rank-1.log").read_bytes()
    assert sorted(log.decode().splitlines()) == sorted(shown + said)
    assert b"\0" not in out + err + log
    for stream in ("stdout", "stderr"):
        assert f"node1: rank 1 opened /dev/{stream} for writing" in stderr, stderr[-3000:]
