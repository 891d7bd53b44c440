"""The agent's view of "the job" (``remote/proctree.py``): the tree walk and the marker sweep.

Real processes: a ``setsid sleep`` detached by a shell that then exits. Below a
process that is not child subreaper it is reparented away from the tree (to
PID 1 or an outer subreaper), where only the marker sweep finds it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest

from clusterlaunch.remote import proctree

MARKER = f"CLUSTERLAUNCH_AGENT={os.getpid()}.test"


@pytest.fixture
def detached() -> Iterator[int]:
    """A ``sleep`` carrying MARKER that has left this process's tree; killed by its PID after."""
    env = dict(os.environ, CLUSTERLAUNCH_AGENT=MARKER.partition("=")[2])
    shell = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"
    pid = int(subprocess.run(["sh", "-c", shell], env=env, capture_output=True).stdout)
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)


def test_the_tree_is_complete_only_below_a_subreaper() -> None:
    assert proctree.tree_is_complete(False) is False
    children = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    assert proctree.tree_is_complete(True) is os.path.exists(children)


def test_the_marker_sweep_finds_what_left_the_tree(detached: int) -> None:
    killer = proctree.TreeKiller(os.getpid(), MARKER, grace=5)
    assert detached not in killer.targets()  # reparented: the walk cannot see it
    assert detached in killer.targets(sweep=True)


def test_a_complete_tree_is_not_swept(detached: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Below a subreaper nothing leaves the tree, so the sweep (every process on the
    # host read) is skipped; here, outside one, that shows as the detached sleep unseen.
    killer = proctree.TreeKiller(os.getpid(), MARKER, grace=5)
    killer.tree_complete = True
    swept: list[str] = []
    monkeypatch.setattr(proctree, "marked_processes", lambda marker: swept.append(marker) or [])
    assert detached not in killer.targets(sweep=True)
    assert swept == []
