"""Arrivals: one look says which control sockets are in place and whether a child ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from clusterlaunch.transport.sshready import Arrivals


def test_a_socket_counts_once_it_is_in_place(tmp_path: Path) -> None:
    arrivals = Arrivals(str(tmp_path))
    arrivals.look()
    assert not arrivals.up(str(tmp_path / "3"))
    (tmp_path / "3").touch()
    assert not arrivals.up(str(tmp_path / "3"))  # not until the next look
    arrivals.look()
    assert arrivals.up(str(tmp_path / "3")) and not arrivals.up(str(tmp_path / "4"))


def test_a_missing_directory_shows_nothing(tmp_path: Path) -> None:
    arrivals = Arrivals(str(tmp_path / "gone"))
    arrivals.look()
    assert not arrivals.up(str(tmp_path / "gone" / "0"))


def test_an_ended_child_is_seen_and_left_for_its_owner_to_reap(tmp_path: Path) -> None:
    # In a process of its own: this one's other children (other tests') could have ended.
    program = f"""
import subprocess, time
from clusterlaunch.transport.sshready import Arrivals
arrivals = Arrivals({str(tmp_path)!r})
running = subprocess.Popen(["sleep", "30"])
arrivals.look()
before = arrivals.child_ended
ended = subprocess.Popen(["sh", "-c", "exit 7"])
deadline = time.monotonic() + 10
while not arrivals.child_ended and time.monotonic() < deadline:
    time.sleep(0.01)
    arrivals.look()
print(before, arrivals.child_ended, ended.poll())  # the look did not reap it: Popen gets 7
running.kill()
running.wait()
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "7"]
