"""Per-user records of running jobs on a host, for ``clusterlaunch ps``/``kill`` (stdlib only).

Kept on a local filesystem (``/run/user/UID`` or ``/tmp``, see :func:`state_dirs`),
never in a home directory that NFS may share between hosts. A record names the agent by PID
*and* start time, so a recycled PID is never mistaken for a job. They are read, and dead
agents' swept, in ``remote/recordfiles.py``.
"""

import os
import time

from clusterlaunch.core.protocol import to_json  # bundle: strip
from clusterlaunch.remote.proctree import read_stat  # bundle: strip


def hostname():
    """This host's name, without importing socket."""
    return os.uname().nodename


def state_dirs():
    """Where this user's job records may be on this host; agents write to the first.

    Never taken from the environment: a ``setup:`` that exports
    ``XDG_RUNTIME_DIR`` (or a login that does not set it) would make an agent
    and ``clusterlaunch ps`` look in different places. ``/run/user/UID`` is
    what ``XDG_RUNTIME_DIR`` normally names (local tmpfs, private); ``/tmp``
    otherwise. Both are read, so a job is found wherever it could write.
    """
    uid = os.getuid()
    runtime = "/run/user/%d" % uid
    dirs = ["/tmp/clusterlaunch-%d" % uid]
    try:
        info = os.lstat(runtime)
    except OSError:
        return dirs
    if info.st_uid == uid and os.path.isdir(runtime):
        dirs.insert(0, os.path.join(runtime, "clusterlaunch"))
    return dirs


def private_dir(path):
    """Create ``path`` 0700 if needed; True only if it is ours and private."""
    try:
        os.makedirs(path, 0o700, exist_ok=True)
        info = os.lstat(path)
    except OSError:
        return False
    return ours_alone(info, 0o077) and os.path.isdir(path)


def ours_alone(info, others=0o022):
    """Whether the folder or file of ``info`` (its ``stat``) is this user's and has none of
    the mode bits ``others``: by default, no other user may change it or what it holds."""
    return info.st_uid == os.getuid() and not info.st_mode & others


def private_state_dir():
    """The first of :func:`state_dirs` that is this user's and private (made if needed), or
    None: records and notes are written there only."""
    return next((path for path in state_dirs() if private_dir(path)), None)


def record_folder():
    """Where this user's agents write their records: the first private state dir (the last
    one's path when none is, to name in a message)."""
    return private_state_dir() or state_dirs()[-1]


def process_start_time(pid):
    """Kernel start time of ``pid`` in clock ticks, or None if it is gone.

    A zombie is gone: a SIGKILLed agent (its host crashed, or ``kill_host`` in
    the simulated cluster) stays one until its new parent reaps it, and its
    record must not make the next preflight think the job still runs.
    """
    info = read_stat(pid)
    return None if info is None or info[0] in ("Z", "X") else info[3]


class JobRecord:
    """The on-disk record of one node's job, removed when the job ends."""

    def __init__(self, path):
        self.path = path

    @classmethod
    def create(cls, args, job_pid, tail_dir=None):
        """Write the record; None (and no error) where no private state dir exists."""
        folder = private_state_dir()
        if folder is None:
            return None
        me = os.getpid()
        start = process_start_time(me)
        record = {
            "job_id": args.job_id,
            "node_rank": args.node_rank,
            "nodes": args.nodes,  # kill lists each node, found or not
            "agent_pid": me,
            "agent_start": start,
            "pgid": job_pid,
            "started_at": time.time(),
            "command": args.argv,
            "hostname": hostname(),
            "cwd": os.getcwd(),
            "grace": args.grace,
            "tail_dir": tail_dir,
            # "server_ip server_port" of the SSH session: tells hosts apart that
            # share one machine (and one state directory), as test hosts do.
            "ssh_server": " ".join(os.environ.get("SSH_CONNECTION", "").split()[2:4]),
            # Set by the controller for a job that may restart (--max-restarts): 0, 1, ...
            "restart_count": os.environ.get("CLUSTERLAUNCH_RESTART_COUNT"),
        }
        name = "%s.n%d.%d.%s.json" % (args.job_id, args.node_rank, me, start)
        path = os.path.join(folder, name)
        temporary = path + ".tmp"
        try:  # checked writable just before (scratch_problem): only a race fails here
            with open(temporary, "w") as handle:
                handle.write(to_json(record))
            os.replace(temporary, path)
        except OSError:
            return None
        return cls(path)

    def remove(self):
        """The job has ended here."""
        remove_file(self.path)


_KILLED = ".killed"
_OLD_NOTES = (_KILLED, ".ended")  # .ended: left by an older version's restartable jobs
NOTE_KEEP_S = 86400.0
"""A kill mark lives this long: a job still starting when it was left (a slow setup, a
restart's backoff) finds it; then it is swept, so marks never pile up."""


def mark_killed(job_id):
    """Leave word, time-stamped, that ``job_id`` was killed, whether or not it runs here: a
    job of that id whose controller started before it does not start (its agents look at
    the go, a restart's preflight too). Marks older than :data:`NOTE_KEEP_S` go first."""
    sweep_old_notes()
    folder = private_state_dir()
    if folder is None:
        return False
    path = os.path.join(folder, job_id + _KILLED)
    with open(path, "w"):
        pass
    os.utime(path)  # an existing mark is dated anew
    return True


def remove_file(path):
    """Remove the file ``path`` if it is there."""
    try:
        os.unlink(path)
    except OSError:
        pass


def killed_at(job_id):
    """When ``job_id`` was last killed on this host (``time.time()``), or None."""
    times = []
    for folder in state_dirs():
        try:
            times.append(os.stat(os.path.join(folder, job_id + _KILLED)).st_mtime)
        except OSError:
            pass
    return max(times) if times else None


def killed_ago(job_id):
    """How many seconds ago ``job_id`` was last killed here, or None: a span, which the
    controller compares with its own clock (the hosts' clocks may differ from it)."""
    when = killed_at(job_id)
    return None if when is None else max(0.0, time.time() - when)


def killed_since(job_id, since=None):
    """Whether ``job_id`` was killed here after its controller started, ``since`` seconds
    ago (the go says; without one, ``exec``: after this agent's session began, its setup
    before it)."""
    when = killed_at(job_id)
    if when is None:
        return False
    start = time.time() - since if since is not None else started_at(os.getpid())
    return start is not None and when >= start


def started_at(pid):
    """When ``pid`` started, on ``time.time()``'s clock, or None if it is gone."""
    ticks = process_start_time(pid)
    try:
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return None if ticks is None else time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def sweep_old_notes():
    """Remove the kill marks left more than :data:`NOTE_KEEP_S` ago."""
    old = time.time() - NOTE_KEEP_S
    for folder in state_dirs():
        try:
            names = [n for n in os.listdir(folder) if n.endswith(_OLD_NOTES)]
        except OSError:
            continue
        for path in (os.path.join(folder, name) for name in names):
            try:
                if os.lstat(path).st_mtime < old:
                    os.unlink(path)
            except OSError:
                continue


def this_hosts(records):
    """The ``records`` of jobs that came in through this session's sshd (address and port).

    A machine's records are all this machine's, but each sshd on it is a host: the
    simulated ones share one machine, each its own address (127.0.0.11, .12, ...) or
    port. A job that came in through another sshd is another host's, which this one
    must neither count as its own (the preflight), list nor kill; that host answers
    for it itself. Not over SSH (``localhost``, ``srun``), or a record that names no
    server: nothing to tell apart, kept.
    """
    server = " ".join(os.environ.get("SSH_CONNECTION", "").split()[2:4])
    return [r for r in records if not server or r.get("ssh_server", "") in ("", server)]
