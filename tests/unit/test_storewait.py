"""Other nodes start torchrun's main once node 0's store listens (``remote/storewait.py``).

The program runs in a real interpreter against real sockets; torch is a stub
package here (``torch/distributed/run.py`` that reports, when run as ``__main__``, what it
was given and when), so the test sees the order of events, not torch's import.
The real torch runs it in every multi-node job of the cluster tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterlaunch.remote.storewait import program, store_waiting

TORCHRUN = ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
STUB_RUN = """\
import json, logging, sys, time
if __name__ == "__main__":  # run as -m runs it: its logger's name decides torch's format
    print(json.dumps({"argv": sys.argv, "at": time.monotonic(), "file": __file__,
                      "logger": logging.getLogger(__name__).name}))
"""


def node_args(rank: str, port: int, nnodes: str = "2") -> list[str]:
    return [
        "--nnodes", nnodes, "--nproc-per-node", "2", "--node-rank", rank,
        "--rdzv-backend", "static", "--master-addr", "127.0.0.1", "--master-port", str(port),
        "--redirects", "3", "--log-dir", "/tmp/x", "train.py", "--node-rank", "0",
    ]  # fmt: skip


@pytest.mark.parametrize("rank", ["1", "7", "1023"])
def test_a_node_other_than_0_runs_torchrun_through_the_program(rank: str) -> None:
    argv = [*TORCHRUN, *node_args(rank, 29500)]
    assert store_waiting(argv) == [TORCHRUN[0], "-c", program(), *argv[3:]]


@pytest.mark.parametrize(
    "argv",
    [
        [*TORCHRUN, *node_args("0", 29500)],  # node 0 opens the store: nothing to wait for
        ["python", "-m", "torch.distributed.run", "--standalone", "train.py"],  # no node rank
        ["sh", "-c", "torchrun --node-rank 1"],  # not torchrun as the plan starts it
        ["python", "-m", "other", "--node-rank", "1"],
        ["python"],
    ],
)
def test_anything_else_starts_as_it_is(argv: list[str]) -> None:
    assert store_waiting(argv) is argv


def stub_torch(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``torch.distributed.run`` is :data:`STUB_RUN`."""
    run = tmp_path / "torch" / "distributed" / "run.py"
    run.parent.mkdir(parents=True)
    for package in (run.parent, run.parent.parent):
        (package / "__init__.py").write_text("")
    run.write_text(STUB_RUN)
    return dict(os.environ, PYTHONPATH=str(tmp_path))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_main_runs_only_once_node_0_listens_with_torchrun_s_own_arguments(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = node_args("1", port)
    node = subprocess.Popen(
        [sys.executable, "-c", program(), *args],
        stdout=subprocess.PIPE,
        env=stub_torch(tmp_path),
    )
    time.sleep(0.3)  # the node dials a closed port meanwhile: refused, again and again
    assert node.poll() is None
    with socket.create_server(("127.0.0.1", port)) as store:
        listening_at = time.monotonic()
        dial, _ = store.accept()
        with dial:
            dial.settimeout(5)
            assert dial.recv(1) == b""  # the node closed its dial and sent nothing
        out, _ = node.communicate(timeout=30)
    report = json.loads(out)
    assert report["at"] > listening_at
    assert report["argv"] == [report["file"], *args]  # as `python -m` sets it
    assert report["logger"] == "__main__"
    assert node.returncode == 0


def test_without_an_answer_torchrun_starts_anyway_after_the_wait(tmp_path: Path) -> None:
    port = free_port()
    args = node_args("3", port, nnodes="4")
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", program(wait_s=0.5), *args],
        capture_output=True,
        env=stub_torch(tmp_path),
        timeout=30,
        check=True,
    )
    report = json.loads(done.stdout)
    assert report["at"] - started >= 0.5
    assert report["argv"][1:] == args


STORE_AFTER_A_DIAL = """\
import socket, sys
from datetime import timedelta
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      timeout=timedelta(seconds=20))
for _ in range(3):  # three nodes' dials
    socket.create_connection(("127.0.0.1", store.port), 5).close()
client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=20))
client.set("rank1", "up")
print(store.get("rank1").decode())
"""


def test_the_real_store_takes_a_dial_that_sent_nothing_in_silence() -> None:
    pytest.importorskip("torch")
    done = subprocess.run(
        [sys.executable, "-c", STORE_AFTER_A_DIAL], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "up\n", "")
