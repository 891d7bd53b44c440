"""Process-tree helpers used by the agent (stdlib only, Linux /proc).

Bundled into the remote programs after ``core/exits`` (see
:mod:`clusterlaunch.remote`): its package imports are marked ``# bundle: strip``.

Also where the remote programs get ``signal`` from: CPython's ``_signal``, which the
``signal`` module wraps in enums; that (with ``enum``) cost every agent ~3 ms of its
start-up (``python -S``, 60 rounds here), and the programs need only numbers.
"""

import os
import time

try:
    import _signal as signal
except ImportError:  # an interpreter without it: the module, enums and all
    import signal

from clusterlaunch.core.exits import ExitStatus  # bundle: strip

PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1


def become_subreaper():
    """Ask Linux to reparent orphaned descendants to us instead of PID 1.

    torchrun starts workers in their own sessions, and a SIGKILLed torchrun
    leaves them orphaned; as subreaper they stay in our tree, so teardown still
    finds them. Returns False where the kernel cannot do it.
    """
    try:
        return prctl()(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def term_when_parent_dies(agent_pid):
    """In the job's process, before exec: SIGTERM it if the agent dies.

    The one case the agent cannot handle is its own SIGKILL; then torchrun at
    least gets SIGTERM, which it forwards to its workers before exiting.
    """
    try:
        prctl()(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != agent_pid:  # the agent died before prctl took effect
        os._exit(ExitStatus.TERMINATED)


def route_signals(handler, wake_fd):
    """The agent's signals to ``handler`` (which only records them), its loop woken through
    ``wake_fd``: SIGTERM, SIGINT, SIGHUP, SIGUSR1 (``clusterlaunch kill``), and SIGCHLD.

    A child's end wakes the loop too: torchrun's pipes end just before its exit
    status is ready, and the loop then slept 50 ms (a run's end: 0.02/0.07 s).
    """
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(signum, handler)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    os.set_blocking(wake_fd, False)
    signal.set_wakeup_fd(wake_fd)


def prctl():
    """libc's prctl(2): see :func:`libc_function`."""
    return libc_function("prctl")


def libc_function(name, argtypes=""):
    """libc's function ``name`` (int result), called through ctypes' C part, ``_ctypes``.

    ``import ctypes`` cost every agent 4.2 ms of CPU (its Python part builds some 30
    types), ``import _ctypes`` 0.65 ms (``python -S``, 60 rounds, CPython 3.11 here).
    ctypes itself is used wherever the C part is not as expected. ``argtypes``: one
    struct code per argument where a C ``int`` would not do (``"q"``: a 64-bit ``off_t``);
    none: every argument passed as an ``int``. Its ``errno``: :func:`libc_errno`.
    """
    try:
        import _ctypes

        def c_type(code):
            class CType(_ctypes._SimpleCData):
                _type_ = code

            return CType

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = c_type("i")

        class Libc:  # what ctypes.CDLL(None) is to a function: its _handle
            _handle = _ctypes.dlopen(None)

        function = Function((name, Libc))
        types = [c_type(code) for code in argtypes]
    except (ImportError, AttributeError, TypeError):
        import ctypes

        function = getattr(ctypes.CDLL(None, use_errno=True), name)
        types = [{"i": ctypes.c_int, "q": ctypes.c_int64}[code] for code in argtypes]
    if types:
        function.argtypes = types
    return function


def libc_errno():
    """The ``errno`` a :func:`libc_function` call left (ctypes' own copy of it)."""
    import _ctypes

    return _ctypes.get_errno()


def tree_is_complete(subreaper):
    """Whether walking the tree below this process finds every process it started.

    True when it is child subreaper (orphans below it are reparented to it, not
    to PID 1) and the kernel lists children (``/proc/PID/task/TID/children``,
    CONFIG_PROC_CHILDREN): then the marker sweep of every ``/proc/PID/environ``
    finds nothing more, and costs ~10 us per process on the host (1.35 ms at
    130 processes here; thousands on a GPU node), once or twice per job end.
    """
    pid = os.getpid()
    return bool(subreaper) and os.path.exists("/proc/%d/task/%d/children" % (pid, pid))


def read_stat(pid):
    """(state, ppid, pgid, starttime) of ``pid``, or None if it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def children_of(pid):
    """Direct children of ``pid`` (all its threads), via /proc/<pid>/task/*/children."""
    kids = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid), "rb") as handle:
                kids.extend(int(word) for word in handle.read().split())
        except OSError:
            continue
    return kids


def descendants(root):
    """Every live (non-zombie) process below ``root``."""
    found = []
    stack = [root]
    seen = {root}
    while stack:
        for kid in children_of(stack.pop()):
            if kid in seen:
                continue
            seen.add(kid)
            stack.append(kid)
            info = read_stat(kid)
            if info is not None and info[0] != "Z":
                found.append(kid)
    return found


def marked_processes(*markers):
    """Processes of ours whose environment contains one of ``markers`` (``NAME=value``;
    None: no marker).

    A second net behind the subreaper, for kernels without subreapers or children
    lists (``tree_is_complete``), and for what a setup left (``teardown.setup_marker``);
    only our own user's environments are readable.
    Mid-``execve`` a process's environment reads empty for a moment (1 read in 300
    of a ``setsid sleep`` just started, here; a sweep missed one so in CI): the
    empty ones are read once more.
    """
    needles, me = [m.encode() + b"\0" for m in markers if m], str(os.getpid())
    if not needles:
        return []
    try:
        names = os.listdir("/proc")
    except OSError:  # no descriptor left (ulimit -n): the agent's start failure says so
        return []
    found, empty = _marked([n for n in names if n.isdigit() and n != me], needles)
    if empty:  # rare: kernel threads and zombies give an error here, not b""
        time.sleep(0.001)
        found += _marked(empty, needles)[0]
    return found


def _marked(names, needles):
    """The live processes among ``names`` whose environment holds one of ``needles``; the empty."""
    found, empty = [], []
    for name in names:
        try:
            with open("/proc/%s/environ" % name, "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if not environ:
            empty.append(name)
        elif any(needle in environ or environ.endswith(needle[:-1]) for needle in needles):
            info = read_stat(int(name))
            if info is not None and info[0] != "Z":
                found.append(int(name))
    return found, empty


def reap(root, keep):
    """Collect dead children of ``root`` (orphans land on us as subreaper).

    ``keep`` is left alone: its status belongs to the agent's ``Job``
    (:mod:`clusterlaunch.remote.spawn`), which reaps it itself.
    """
    for kid in children_of(root):
        if kid == keep:
            continue
        try:
            os.waitpid(kid, os.WNOHANG)
        except ChildProcessError:
            continue


def kill_now(pid):
    """SIGKILL ``pid`` if it still exists."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill_group_now(group):
    """SIGKILL every process of process group ``group`` that is still there."""
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


class WorkerWatch:
    """Remembers when each of torchrun's workers died (for cross-host root cause)."""

    def __init__(self):
        self.alive = set()
        self.died_at = {}

    def poll(self, torchrun_pid):
        now = time.time()
        current = set()
        for pid in children_of(torchrun_pid):
            info = read_stat(pid)
            if info is not None and info[0] != "Z":
                current.add(pid)
        for pid in self.alive - current:
            self.died_at.setdefault(pid, now)
        self.alive = current
