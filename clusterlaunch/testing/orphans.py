"""Find, wait for and kill processes left behind on simulated hosts; PID-safe signalling.

Every simulated sshd sets ``CLUSTERLAUNCH_SIM_HOST=<marker>`` in the environment of the
sessions it starts (``SetEnv`` in its sshd_config), and every process started from such a
session inherits it.  Scanning ``/proc/<pid>/environ`` for the markers of one cluster
therefore finds everything a test started on that cluster, even processes that
daemonised (``nohup``, ``setsid``, double fork) and were re-parented to init.

Markers are unique per cluster instance, so one test run never matches another's
processes.  Everything here is by PID (checked against the kernel start time where it
matters, against PID reuse); nothing matches process names.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

#: Environment variable that simulated sshd servers set in every session they start.
MARKER_VAR = "CLUSTERLAUNCH_SIM_HOST"


@dataclass(frozen=True)
class ProcInfo:
    """A live process that carries a simulated host's marker in its environment."""

    pid: int
    ppid: int
    pgid: int
    state: str
    marker: str
    cmdline: str

    def __str__(self) -> str:
        return (
            f"pid={self.pid} ppid={self.ppid} pgid={self.pgid} state={self.state} "
            f"marker={self.marker} cmd={self.cmdline!r}"
        )


@dataclass(frozen=True)
class _Stat:
    state: str
    ppid: int
    pgid: int
    starttime: int


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _read_stat(pid: int) -> _Stat | None:
    """Parse /proc/<pid>/stat; None when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the
    # last ')' so that the remaining fields are positional.
    fields = raw[raw.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return _Stat(fields[0], int(fields[1]), int(fields[2]), int(fields[19]))


def start_time(pid: int) -> int | None:
    """Kernel start time (clock ticks since boot) of *pid*: with the PID, a unique identity."""
    stat = _read_stat(pid)
    return None if stat is None else stat.starttime


def is_alive(pid: int) -> bool:
    """True when *pid* exists and is not a zombie."""
    stat = _read_stat(pid)
    return stat is not None and stat.state not in ("Z", "X")


def _marker_of(pid: int, wanted: frozenset[bytes]) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:  # gone, or another user's process
        return None
    prefix = MARKER_VAR.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix) and entry[len(prefix) :] in wanted:
            return entry[len(prefix) :].decode()
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def find_processes(markers: Iterable[str]) -> list[ProcInfo]:
    """List live, non-zombie processes whose environment carries one of *markers*.

    The calling process is never listed.  Processes that vanish while /proc is being
    read are silently skipped.
    """
    wanted = frozenset(m.encode() for m in markers)
    if not wanted:
        return []
    me = os.getpid()
    found = []
    for pid in _pids():
        if pid == me:
            continue
        marker = _marker_of(pid, wanted)
        if marker is None:
            continue
        stat = _read_stat(pid)
        if stat is None or stat.state in ("Z", "X"):
            continue
        found.append(ProcInfo(pid, stat.ppid, stat.pgid, stat.state, marker, _cmdline(pid)))
    return found


def wait_until_gone(
    markers: Iterable[str], timeout: float, interval: float = 0.02
) -> list[ProcInfo]:
    """Poll until no process carries *markers*; return what is still alive at the deadline.

    An empty list means clean.
    """
    wanted = list(markers)
    deadline = time.monotonic() + timeout
    while True:
        left = find_processes(wanted)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(interval)


def kill_processes(procs: Iterable[ProcInfo], sig: int = signal.SIGKILL) -> list[ProcInfo]:
    """Send *sig* to each process by PID (last-resort cleanup); return those signalled.

    Each PID is re-checked for its marker just before the signal, so a PID that was
    reused by an unrelated process in the meantime is left alone.
    """
    killed = []
    for proc in procs:
        if _marker_of(proc.pid, frozenset([proc.marker.encode()])) is None:
            continue
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            continue
        killed.append(proc)
    return killed


def descendants(roots: Iterable[int]) -> list[int]:
    """PIDs of all live descendants of *roots* (not the roots themselves), from one scan."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        stat = _read_stat(pid)
        if stat is not None and stat.state not in ("Z", "X"):
            children.setdefault(stat.ppid, []).append(pid)
    found: list[int] = []
    todo = list(roots)
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def executable(pid: int) -> str | None:
    """Path of the program *pid* runs, or None when gone or not ours to inspect."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def signal_pid(pid: int, sig: int, starttime: int | None = None) -> bool:
    """Send *sig* to *pid* if it is still the process that started at *starttime*."""
    if starttime is not None and start_time(pid) != starttime:
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def has_exited(pid: int, starttime: int | None = None) -> bool:
    """True once *pid* has exited; collects it if it is a child of ours."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:  # not our child, or already collected
        pass
    if starttime is not None and start_time(pid) != starttime:
        return True  # gone; the PID may already belong to another process
    return not is_alive(pid)


def stop_trees(
    roots: dict[int, int | None], exe: str, sig: int = signal.SIGTERM, grace: float = 3.0
) -> list[int]:
    """Stop *roots* ({pid: starttime}) and all their descendants that run *exe*.

    Meant for servers such as sshd whose per-connection children call setsid() and so
    survive their parent: the roots are SIGSTOPped first so that they cannot fork while
    their descendants are collected, then everything gets *sig*, and SIGKILL after
    *grace* seconds.  Returns the PIDs still alive 5 s after that (normally none).
    """
    live = {p: t for p, t in roots.items() if signal_pid(p, signal.SIGSTOP, t)}
    victims = dict(roots)  # roots that exited already are collected below, too
    for pid in descendants(live):
        if executable(pid) == exe:
            victims[pid] = start_time(pid)
    for pid, t in victims.items():
        signal_pid(pid, sig, t)
    for pid, t in live.items():
        signal_pid(pid, signal.SIGCONT, t)
    deadline, killed = time.monotonic() + grace, False
    while victims := {p: t for p, t in victims.items() if not has_exited(p, t)}:
        if time.monotonic() > deadline:
            if killed:
                return sorted(victims)
            for pid, t in victims.items():
                signal_pid(pid, signal.SIGKILL, t)
            deadline, killed = time.monotonic() + 5.0, True
        time.sleep(0.005)
    return []
