"""``--sync``'s rsync ends with the controller, even a SIGKILLed one (``controller/lifeline.py``).

A real rsync to a simulated host, of a sparse file large enough to take tens of
seconds; the processes of the copy are found in the controller's process tree
before the kill and then looked up by PID and start time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterlaunch.remote.proctree import descendants, read_stat
from tests.cluster.support import cli_argv, write_hosts
from tests.programs import needs_rsync

pytestmark = [pytest.mark.cluster, needs_rsync]


def copy_processes(controller: int) -> dict[int, tuple[int, bytes]]:
    """``{pid: (start time, command line)}`` below the controller: the watcher, rsync, ssh."""
    found = {}
    for pid in descendants(controller):
        info = read_stat(pid)
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if info is not None:
            found[pid] = (info[3], command)
    return found


def alive(processes: dict[int, tuple[int, bytes]]) -> list[int]:
    """Those still running (the same process: the same start time)."""
    left = []
    for pid, (started, _) in processes.items():
        info = read_stat(pid)
        if info is not None and info[3] == started and info[0] != "Z":
            left.append(pid)
    return left


@pytest.mark.parametrize("client", ["paramiko", "openssh"])  # openssh: rsync's ssh multiplexed
def test_a_sigkilled_controller_takes_its_rsync_and_ssh_with_it(
    sim_cluster, tmp_path: Path, assert_no_orphans, client: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with (project / "big.bin").open("wb") as handle:
        handle.truncate(16 << 30)  # sparse: nothing on disk, ~40 s through rsync here
    dest = tmp_path / "dest"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(dest)})])
    controller = subprocess.Popen(
        cli_argv("exec", sim_cluster, "--ssh-client", client, "--sync", str(hosts), "--", "true"),
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        processes: dict[int, tuple[int, bytes]] = {}
        while not any(command.startswith(b"ssh\0") for _, command in processes.values()):
            assert time.monotonic() < deadline and controller.poll() is None, processes
            time.sleep(0.1)
            processes = copy_processes(controller.pid)
        while not list(dest.glob(".big.bin.*")):  # the host's rsync is writing
            assert time.monotonic() < deadline and controller.poll() is None
            time.sleep(0.05)
        processes = copy_processes(controller.pid)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait()
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
    assert any(command.startswith(b"rsync\0") for _, command in processes.values()), processes
    deadline = time.monotonic() + 5
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = alive(processes)
    for pid in left:  # by PID, still the same process
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"the copy outlived its controller: {[processes[p] for p in left]}"
    assert_no_orphans(sim_cluster, timeout=5.0)  # the host's rsync --server too
