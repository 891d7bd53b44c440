"""A pids cgroup of a test's own: what runs in it can start only so many threads and processes.

``pids.max`` counts every thread and process of the cgroup, as ``ulimit -u``
counts a user's; root is exempt from ``ulimit -u`` but not from a cgroup, so a
test running as root can give the controller a limit it cannot ignore. cgroup
v1's pids hierarchy, or v2's root where the pids controller is enabled for its
children; the test's cgroup is removed afterwards (retried while its last
processes exit).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
REMOVE_WAIT_S = 10.0


def _root() -> Path | None:
    for root in _ROOTS:
        controls = root / "cgroup.subtree_control"
        v1 = root.name == "pids" and (root / "cgroup.procs").is_file()
        if v1 or (controls.is_file() and "pids" in controls.read_text().split()):
            return root if os.access(root, os.W_OK) else None
    return None


def why_not() -> str | None:
    """The skip reason where no pids cgroup can be made."""
    if os.geteuid() != 0:
        return "making a pids cgroup needs root"
    if _root() is None:
        return "no writable pids cgroup hierarchy (/sys/fs/cgroup/pids or cgroup v2 with pids)"
    return None


@contextmanager
def pids_group(limit: int) -> Iterator[Path]:
    """A new cgroup with ``pids.max`` ``limit`` (a process joins it by writing its PID
    into its ``cgroup.procs``); removed once its processes are gone."""
    root = _root()
    assert root is not None, why_not()
    group = root / f"clusterlaunch-test-{secrets.token_hex(4)}"
    group.mkdir()
    try:
        (group / "pids.max").write_text(f"{limit}\n")
        yield group
    finally:
        _remove(group)


@contextmanager
def pids_limit(limit: int) -> Iterator[list[str]]:
    """The argv prefix that runs a command in a new cgroup with ``pids.max`` ``limit``."""
    with pids_group(limit) as group:
        yield ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh", str(group)]


def _remove(group: Path) -> None:
    deadline = time.monotonic() + REMOVE_WAIT_S
    while True:
        try:
            group.rmdir()
            return
        except OSError:  # busy: a process of the command is still exiting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
