"""The agent's view of "the job" (``remote/proctree.py``): the tree walk and the marker sweep.

Real processes: a ``setsid sleep`` detached by a shell that then exits. Below a
process that is not child subreaper it is reparented away from the tree (to
PID 1 or an outer subreaper), where only the marker sweep finds it.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from clusterlaunch.core import setupguard
from clusterlaunch.remote import proctree, teardown

MARKER = f"CLUSTERLAUNCH_AGENT={os.getpid()}.test"


@pytest.fixture
def detached() -> Iterator[int]:
    """A ``sleep`` carrying MARKER that has left this process's tree; killed by its PID after."""
    env = dict(os.environ, CLUSTERLAUNCH_AGENT=MARKER.partition("=")[2])
    shell = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", shell], env=env, capture_output=True).stdout)
    # Until it runs sleep: in the middle of execve a process's environ reads empty for a
    # moment (1 read in 300 here), and a sweep then missed it (seen once in CI).
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
        assert time.monotonic() < deadline, "the detached sleep never started"
        time.sleep(0.001)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_tree_is_complete_only_below_a_subreaper() -> None:
    assert proctree.tree_is_complete(False) is False
    children = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    assert proctree.tree_is_complete(True) is os.path.exists(children)


def test_the_marker_sweep_finds_what_left_the_tree(detached: int) -> None:
    killer = teardown.TreeKiller(os.getpid(), MARKER, grace=5)
    assert detached not in killer.targets()  # reparented: the walk cannot see it
    assert detached in killer.targets(sweep=True)


def test_the_sweep_reads_an_empty_environment_again(
    detached: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Mid-execve a process's environ reads empty for a moment; the sweep's second look
    # finds it (without it, this detached sleep was missed: seen in CI).
    empty_once = [f"/proc/{detached}/environ"]

    def reading(path: str, mode: str = "r") -> IO[bytes]:
        if path in empty_once:
            empty_once.remove(path)
            return io.BytesIO(b"")
        return open(path, mode)

    monkeypatch.setattr(proctree, "open", reading, raising=False)
    assert detached in proctree.marked_processes(MARKER)
    assert empty_once == []  # the first read was the empty one


def test_a_complete_tree_is_not_swept(detached: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Below a subreaper nothing leaves the tree, so the sweep (every process on the
    # host read) is skipped; here, outside one, that shows as the detached sleep unseen.
    killer = teardown.TreeKiller(os.getpid(), MARKER, grace=5)
    killer.tree_complete = True
    swept: list[str] = []
    monkeypatch.setattr(teardown, "marked_processes", lambda *marks: swept.extend(marks) or [])
    assert detached not in killer.targets(sweep=True)
    assert swept == []


def test_the_setup_marker_is_only_this_very_processs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The wrapper exports PID.START of the shell that then becomes the program; any other
    # value (a clusterlaunch run from inside a job with a setup) marks processes not ours.
    assert teardown.SETUP_VAR == setupguard.SETUP_VAR  # one name, on both sides
    stat = proctree.read_stat(os.getpid())
    assert stat is not None
    mine = f"{os.getpid()}.{stat[3]}"
    monkeypatch.setenv(teardown.SETUP_VAR, mine)
    assert teardown.setup_marker() == f"CLUSTERLAUNCH_SETUP={mine}"
    for other in (f"{os.getpid()}.{stat[3] + 1}", f"{os.getppid()}.{stat[3]}", ""):
        monkeypatch.setenv(teardown.SETUP_VAR, other)
        assert teardown.setup_marker() is None
    monkeypatch.delenv(teardown.SETUP_VAR)
    assert teardown.setup_marker() is None


def test_what_a_setup_detached_is_swept_below_a_subreaper_too(
    detached: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A setup's daemon left the tree before the program became subreaper: the tree is
    # complete from then on, but only the setup's marker finds that one.
    killer = teardown.TreeKiller(os.getpid(), None, grace=5, setup=MARKER)
    killer.tree_complete = True
    assert detached in killer.targets(sweep=True)
    assert detached not in killer.targets()


# prctl(2) through ctypes' C part: each check runs in a Python of its own (subreaper
# and the parent-death signal are settings of the process that asks for them).
_ASK_SUBREAPER = """
import ctypes, sys
value = ctypes.c_int(-1)
ctypes.CDLL(None).prctl(37, ctypes.byref(value), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
print(became, loaded, value.value)
"""


def _python(code: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {root!r})\n"
                           + code], capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_prctl_makes_the_agent_subreaper_without_loading_ctypes() -> None:
    code = (
        """
from clusterlaunch.remote import proctree
became = proctree.become_subreaper()
loaded = "ctypes" in sys.modules
"""
        + _ASK_SUBREAPER
    )
    assert _python(code).split() == ["True", "False", "1"]


def test_prctl_falls_back_to_ctypes_where_its_c_part_differs() -> None:
    code = (
        """
import ctypes, _ctypes
del _ctypes.dlopen  # ctypes kept its own reference when it was imported
from clusterlaunch.remote import proctree
became = proctree.become_subreaper()
loaded = proctree.prctl().__class__.__module__
"""
        + _ASK_SUBREAPER
    )
    assert _python(code).split() == ["True", "ctypes", "1"]


@pytest.mark.parametrize("asked", [True, False], ids=["parent-death signal", "control"])
def test_the_job_gets_sigterm_when_the_agent_is_killed(asked: bool) -> None:
    code = f"""
import os, signal, time
from clusterlaunch.remote import proctree
read, write = os.pipe()
agent = os.fork()
if agent == 0:  # the agent: starts the job, then waits to be killed
    if os.fork() == 0:
        if {asked}:
            proctree.term_when_parent_dies(os.getppid())
        os.write(write, b"%d" % os.getpid())
        time.sleep(30)
        os._exit(0)
    time.sleep(30)
job = int(os.read(read, 64))
os.kill(agent, signal.SIGKILL)
os.waitpid(agent, 0)
deadline = time.monotonic() + {5 if asked else 0.5}  # control: long enough to have ended
while time.monotonic() < deadline:
    try:
        state = open("/proc/%d/stat" % job).read().rpartition(")")[2].split()[0]
    except OSError:
        state = "gone"
    if state in ("Z", "gone"):
        break
    time.sleep(0.01)
if state not in ("Z", "gone"):
    os.kill(job, signal.SIGKILL)
print(state)
"""
    ended = _python(code).strip() in ("Z", "gone")
    assert ended is asked
