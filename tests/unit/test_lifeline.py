"""``controller/lifeline.py``: a program below its watcher, with real short processes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from clusterlaunch.controller.lifeline import Lifeline, kill_group
from clusterlaunch.remote.proctree import read_stat


def test_the_program_runs_as_itself_and_its_status_comes_back() -> None:
    with Lifeline() as lifeline:
        process = lifeline.popen(
            ["sh", "-c", "read line; echo got $line; echo err >&2; exit 3"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = process.communicate(b"files\n", timeout=30)
    assert (process.returncode, out, err) == (3, b"got files\n", b"err\n")


def test_a_program_that_cannot_start_says_why() -> None:
    with Lifeline() as lifeline:
        process = lifeline.popen(["no-such-program-here"], stderr=subprocess.PIPE)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 127
    assert err.startswith(b"cannot run no-such-program-here: ")


def test_cutting_the_lifeline_kills_the_program_and_what_it_started() -> None:
    # What the kernel does when the controller dies: our end of the pipe closes.
    lifeline = Lifeline()
    process = lifeline.popen(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE)
    assert process.stdout is not None
    grandchild = int(process.stdout.readline())
    lifeline.cut()
    assert process.wait(timeout=10) == -9  # the watcher's group, itself included
    deadline = time.monotonic() + 10
    while (info := read_stat(grandchild)) is not None and info[0] != "Z":  # Z: dead, unreaped
        if time.monotonic() > deadline:
            os.kill(grandchild, signal.SIGKILL)
            raise AssertionError("the sleep outlived its lifeline")
        time.sleep(0.01)


def test_kill_group_ends_the_watcher_and_the_program() -> None:
    with Lifeline() as lifeline:
        process = lifeline.popen(["sleep", "300"])
        kill_group(process)
        assert process.wait(timeout=10) == -9
        kill_group(process)  # ended: nothing to do
