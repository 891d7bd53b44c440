"""When this process cannot start a thread or a child process: the limit, named in one line.

To the kernel a thread is a process. ``ulimit -u`` (RLIMIT_NPROC: every process
and thread of the user; root is exempt), a cgroup's ``pids.max`` (a container's
limit, a systemd unit's ``TasksMax``) and ``ulimit -v`` (RLIMIT_AS: each thread
reserves its stack, 8 MiB by default) all end in Python's ``RuntimeError: can't
start new thread``, and fork in EAGAIN or ENOMEM (the OpenSSH client's ssh).
That was a traceback, exit 1, from wherever a thread started (paramiko's
handshake, the fan-out, the keepalives); every thread clusterlaunch starts goes
through :func:`start_thread`, and what runs in the fan-out's threads is turned
into the same error there (:func:`converted`).
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from pathlib import Path

from clusterlaunch.core.errors import LimitReached

THREAD_ERROR = "can't start new thread"
"""What CPython's RuntimeError says when pthread_create fails (3.8 to 3.13)."""
FORK_ERRNOS = (errno.EAGAIN, errno.ENOMEM)
CGROUP_ROOTS = {"pids": "/sys/fs/cgroup/pids", "": "/sys/fs/cgroup"}
"""Where a cgroup's files are, by its /proc/self/cgroup controllers: v1's pids hierarchy,
v2's unified one (``/sys/fs/cgroup/unified`` on a hybrid system, tried too)."""
FIX = "or use fewer hosts or a lower --fanout"


def start_thread(thread: threading.Thread) -> None:
    """``thread.start()``; :class:`LimitReached`, naming the limit, when none can start."""
    try:
        thread.start()
    except RuntimeError as exc:
        raise converted(exc) from None


def converted(error: Exception) -> Exception:
    """``error``, or :class:`LimitReached` for a thread that could not start."""
    if isinstance(error, RuntimeError) and THREAD_ERROR in str(error):
        return LimitReached(f"cannot start a thread: {limits_text()}")
    return error


def fork_failure(error: OSError) -> str:
    """Why a child process (ssh) could not start: the OS's words, and the limit if one."""
    if error.errno not in FORK_ERRNOS:
        return str(error)
    return f"{error}: {limits_text()}"


def limits_text() -> str:
    """The limits that can keep a thread or process from starting, with the fix."""
    found = _limits()
    if not found:
        return (
            "no ulimit -u, ulimit -v or pids.max applies, so the system ran out of threads "
            f"or memory (/proc/sys/kernel/threads-max, free memory); {FIX}"
        )
    which = f"the limit {found[0]}" if len(found) == 1 else f"one of the limits {', '.join(found)}"
    return f"{which} was reached; raise it, {FIX}"


def _limits() -> list[str]:
    found = []
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if processes != resource.RLIM_INFINITY and os.geteuid() != 0:  # root is exempt
        found.append(f"ulimit -u {processes} (processes and threads of this user)")
    cgroup = _pids_max()
    if cgroup is not None:
        found.append(f"pids.max {cgroup[0]} (cgroup {cgroup[1]})")
    memory = resource.getrlimit(resource.RLIMIT_AS)[0]
    if memory != resource.RLIM_INFINITY:
        found.append(f"ulimit -v {memory // 1024} (KiB of memory; each thread reserves its stack)")
    return found


def _pids_max() -> tuple[int, str] | None:
    """The smallest ``pids.max`` over this process's cgroup and its parents, and where."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    smallest: tuple[int, str] | None = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers not in ("pids", ""):
            continue
        roots = [CGROUP_ROOTS[controllers]]
        roots += ["/sys/fs/cgroup/unified"] if not controllers else []
        for root in roots:
            for directory in _up_to(Path(root), path):
                value = _read_max(directory / "pids.max")
                if value is not None and (smallest is None or value < smallest[0]):
                    smallest = (value, str(directory))
    return smallest


def _up_to(root: Path, path: str) -> list[Path]:
    """``root``/``path`` and each of its parents up to ``root``."""
    parts = [part for part in path.split("/") if part]
    return [root.joinpath(*parts[:depth]) for depth in range(len(parts), -1, -1)]


def _read_max(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit
