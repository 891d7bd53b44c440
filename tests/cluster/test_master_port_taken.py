"""A fixed master port taken between the preflight and torchrun's store.

The preflight proves the port free on node 0 by holding it while every node
dials it; something that binds it the moment the agent lets go beats node 0's
torchrun to it. A hostile tester's ``grab.py`` did: node 0's torchrun died of
``EADDRINUSE`` (40 lines of traceback, "node0 exited with code 1"), and the
other nodes' torchrun had already dialled the foreign listener, as they would
dial another job's store. Now node 0's agent holds the port until the instant
before torchrun starts, the other nodes start torchrun only once node 0's
agent has seen its own torchrun listen there, and the summary says in one line
what happened and what to do.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]


class PortGrabber:
    """Waits until something listens on ``port``, then binds it the moment it is free,
    and counts the connections it accepts (as grab.py did)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.accepted = 0
        self.bound_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PortGrabber:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set() and not self._someone_listens():
            time.sleep(0.005)
        listener = self._bind_when_free()
        if listener is None:
            return
        with listener:
            listener.settimeout(0.1)
            while not self._stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                self.accepted += 1
                conn.close()

    def _someone_listens(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
        except OSError:
            return False
        return True

    def _bind_when_free(self) -> socket.socket | None:
        while not self._stop.is_set():
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind(("0.0.0.0", self.port))
                listener.listen(64)
            except OSError:
                listener.close()
                time.sleep(0.001)
                continue
            self.bound_at = time.monotonic()
            return listener
        return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_port_taken_after_the_preflight_is_named_and_no_node_dials_the_taker(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    port = _free_port()
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    with PortGrabber(port) as grabber:
        result = run_cli("run", sim_cluster, "--master-port", str(port), str(hosts), "sleeper.py")
        time.sleep(0.5)  # a late dial would still be counted
    assert grabber.bound_at is not None, "the grabber never got the port"
    assert result.returncode == 1, result.stderr
    summary = [line for line in result.stderr.splitlines() if "job failed: " in line]
    assert len(summary) == 1, result.stderr
    assert f"master port {port}" in summary[0] and "master_port: auto" in summary[0], summary
    assert grabber.accepted == 0  # no node's torchrun dialled the port's taker
    assert_no_orphans(sim_cluster)
