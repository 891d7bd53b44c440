"""Other nodes start torchrun's main once node 0's own store listens (``remote/storewait.py``).

The program runs in a real interpreter against real sockets; torch is a stub
package here (``torch/distributed/run.py`` that reports, when run as ``__main__``, what it
was given and when), so the test sees the order of events, not torch's import.
Node 0's watch reads this machine's real ``/proc`` about real listeners.
The real torch runs it in every multi-node job of the cluster tests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clusterlaunch.remote.storewait import (
    NoGate,
    StoreOwner,
    StoreWait,
    listening_inodes,
    program,
    store_gate,
)

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
    gate = store_gate(argv, torchrun=True)
    try:
        assert isinstance(gate, StoreWait)
        (release_fd,) = gate.pass_fds
        assert gate.argv == [TORCHRUN[0], "-c", program(release_fd), *argv[3:]]
    finally:
        gate.release()
        os.close(gate.pass_fds[0])


def test_node_0_starts_torchrun_as_it_is_and_watches_its_port() -> None:
    argv = [*TORCHRUN, *node_args("0", 29500)]
    gate = store_gate(argv, torchrun=True)
    assert isinstance(gate, StoreOwner) and gate.argv is argv and gate.port == 29500
    assert gate.pass_fds == () and gate.idle_s(0.05) < 0.05  # it looks often until it saw it


@pytest.mark.parametrize(
    ("argv", "torchrun"),
    [
        ([*TORCHRUN, *node_args("1", 29500)], False),  # exec's command: not a torchrun job
        ([*TORCHRUN, *node_args("1", 29500, nnodes="1")], True),  # one node: nobody to wait
        (["python", "-m", "torch.distributed.run", "--standalone", "train.py"], True),  # no rank
        ([*TORCHRUN, "--node-rank", "1", "--master-port", "AUTO", "t.py"], True),  # no port yet
        (["sh", "-c", "torchrun --node-rank 1"], True),  # not torchrun as the plan starts it
        (["python", "-m", "other", "--node-rank", "1"], True),
        (["python"], True),
    ],
)
def test_anything_else_starts_as_it_is(argv: list[str], torchrun: bool) -> None:
    gate = store_gate(argv, torchrun)
    assert type(gate) is NoGate and gate.argv is argv and gate.pass_fds == ()
    assert gate.idle_s(0.05) == 0.05


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


def start_node(args: list[str], env: dict[str, str], wait_s: float = 60) -> tuple[Popen, int]:
    """The program for a node other than 0, as the agent starts it; and the release's end."""
    read, write = os.pipe()
    node = subprocess.Popen(
        [sys.executable, "-c", program(read, wait_s), *args],
        stdout=subprocess.PIPE,
        env=env,
        pass_fds=(read,),
    )
    os.close(read)
    return node, write


Popen = subprocess.Popen[bytes]


def test_main_runs_only_once_released_and_node_0_listens_with_torchrun_s_own_arguments(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = node_args("1", port)
    node, release = start_node(args, stub_torch(tmp_path))
    with socket.create_server(("127.0.0.1", port)) as store:
        # Something listens, but node 0's agent has not said it is its torchrun's:
        # the node dials nothing (it might be another job's store, or any taker's).
        store.settimeout(1.0)
        with pytest.raises(TimeoutError):
            store.accept()
        assert node.poll() is None
        released_at = time.monotonic()
        os.write(release, b"s")
        os.close(release)
        store.settimeout(30)
        dial, _ = store.accept()
        with dial:
            dial.settimeout(5)
            assert dial.recv(1) == b""  # the node closed its dial and sent nothing
        out, _ = node.communicate(timeout=30)
    report = json.loads(out)
    assert report["at"] > released_at
    assert report["argv"] == [report["file"], *args]  # as `python -m` sets it
    assert report["logger"] == "__main__"
    assert node.returncode == 0


def test_released_before_node_0_listens_the_node_dials_until_it_does(tmp_path: Path) -> None:
    """The release without a listener: node 0's /proc could not tell. The dial waits."""
    port = free_port()
    node, release = start_node(node_args("1", port), stub_torch(tmp_path))
    os.write(release, b"s")
    os.close(release)
    time.sleep(0.3)  # the node dials a closed port meanwhile: refused, again and again
    assert node.poll() is None
    with socket.create_server(("127.0.0.1", port)) as store:
        listening_at = time.monotonic()
        store.accept()[0].close()
        out, _ = node.communicate(timeout=30)
    assert json.loads(out)["at"] > listening_at


def test_without_a_release_nothing_starts(tmp_path: Path) -> None:
    """The agent went away (its end of the pipe closed) before node 0's store was seen."""
    node, release = start_node(node_args("1", free_port()), stub_torch(tmp_path))
    os.close(release)
    out, _ = node.communicate(timeout=30)
    assert (node.returncode, out) == (1, b"")


def test_without_an_answer_torchrun_starts_anyway_after_the_wait(tmp_path: Path) -> None:
    args = node_args("3", free_port(), nnodes="4")
    started = time.monotonic()
    node, release = start_node(args, stub_torch(tmp_path), wait_s=0.5)
    os.write(release, b"s")
    os.close(release)
    out, _ = node.communicate(timeout=30)
    report = json.loads(out)
    assert report["at"] - started >= 0.5
    assert report["argv"][1:] == args


def test_a_release_after_the_program_ended_is_no_error() -> None:
    gate = StoreWait([*TORCHRUN, *node_args("1", 29500)])
    os.close(gate.pass_fds[0])  # the program's end, gone
    gate.release()
    gate.release()  # once only


LISTENER = """\
import socket, sys, time
family = socket.AF_INET6 if sys.argv[1] == "6" else socket.AF_INET
with socket.socket(family) as listener:
    listener.bind(("::" if sys.argv[1] == "6" else "0.0.0.0", 0))
    listener.listen(1)
    print(listener.getsockname()[1], flush=True)
    time.sleep(60)
"""


@contextmanager
def listening_child(family: str = "4") -> Iterator[tuple[int, int]]:
    """A process of its own listening on a free port: (its pid, the port)."""
    child = subprocess.Popen([sys.executable, "-c", LISTENER, family], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        yield child.pid, int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def listener(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    with listening_child(getattr(request, "param", "4")) as found:
        yield found


class Events:
    def __init__(self) -> None:
        self.said: list[dict[str, object]] = []

    def event(self, **fields: object) -> None:
        self.said.append(fields)


@pytest.mark.parametrize("listener", ["4", "6"], indirect=True)
def test_node_0_tells_once_its_own_tree_listens_on_the_port(listener: tuple[int, int]) -> None:
    pid, port = listener
    owner, out = StoreOwner([], port), Events()
    owner.watch(pid, out)
    owner.watch(pid, out)
    assert out.said == [{"event": "store"}]  # once
    assert owner.idle_s(0.05) == 0.05  # and no more looking


def test_a_listener_of_another_process_is_not_node_0_s_store(listener: tuple[int, int]) -> None:
    """Node 0's tree holds a socket, not on the port; the port's listener is someone else's."""
    foreign, port = listener
    with listening_child() as (ours, _):
        owner, out = StoreOwner([], port), Events()
        owner.watch(ours, out)
        assert out.said == [] and owner.watching
    assert not StoreOwner([], free_port()).listens(foreign)  # its tree, another port


def test_listeners_are_read_from_proc(listener: tuple[int, int]) -> None:
    pid, port = listener
    inodes = listening_inodes(port)
    assert inodes is not None and len(inodes) == 1
    assert os.readlink(f"/proc/{pid}/fd/3") == f"socket:[{inodes.pop()}]"
    assert listening_inodes(free_port()) == set()


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
