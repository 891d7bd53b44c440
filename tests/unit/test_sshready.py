"""Arrivals: one look says which control sockets are in place and whether a child ended."""

from __future__ import annotations

import subprocess
import sys
import time
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


class _Master:
    def __init__(self, socket: str, deadline: float) -> None:
        self.socket, self.deadline = socket, deadline


def test_only_masters_whose_socket_is_new_are_due(tmp_path: Path) -> None:
    later = time.monotonic() + 3600
    first, second = _Master(str(tmp_path / "0"), later), _Master(str(tmp_path / "1"), later)
    arrivals = Arrivals(str(tmp_path))
    arrivals.look()
    arrivals.child_ended = False  # this process's other children are not the masters'
    assert arrivals.due([first, second]) == []
    (tmp_path / "1").touch()
    (tmp_path / "1.log").touch()  # not a socket of any master
    arrivals.look()
    arrivals.child_ended = False
    assert arrivals.due([first, second]) == [second]
    arrivals.look()  # nothing new since
    arrivals.child_ended = False
    assert arrivals.due([first, second]) == []


def test_every_master_is_due_when_a_child_ended_or_a_deadline_passed(tmp_path: Path) -> None:
    later = time.monotonic() + 3600
    masters = [_Master(str(tmp_path / "0"), later), _Master(str(tmp_path / "1"), later)]
    arrivals = Arrivals(str(tmp_path))
    arrivals.look()
    arrivals.child_ended = True
    assert arrivals.due(masters) == masters
    arrivals.child_ended = False
    masters[1].deadline = time.monotonic() - 1
    assert arrivals.due(masters) == masters
    assert arrivals.due([]) == []
