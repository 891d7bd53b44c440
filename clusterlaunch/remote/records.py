"""Per-user records of running jobs on a host, for ``clusterlaunch ps``/``kill`` (stdlib only).

Kept on a local filesystem (``/run/user/UID`` or ``/tmp``, see :func:`state_dirs`),
never in a home directory that NFS may share between hosts. A record names the agent by PID
*and* start time, so a recycled PID is never mistaken for a job.
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
    return info.st_uid == os.getuid() and not info.st_mode & 0o077 and os.path.isdir(path)


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

    def __init__(self, path, job_id=None, may_restart=False):
        self.path = path
        self.job_id = job_id
        self.may_restart = may_restart

    @classmethod
    def create(cls, args, job_pid):
        """Write the record; None (and no error) where no private state dir exists."""
        folder = private_state_dir()
        if folder is None:
            return None
        me = os.getpid()
        start = process_start_time(me)
        record = {
            "job_id": args.job_id,
            "node_rank": args.node_rank,
            "agent_pid": me,
            "agent_start": start,
            "pgid": job_pid,
            "started_at": time.time(),
            "command": args.argv,
            "hostname": hostname(),
            "cwd": os.getcwd(),
            "grace": args.grace,
            "tail_dir": args.tail_dir,
            # "server_ip server_port" of the SSH session: tells hosts apart that
            # share one machine (and one state directory), as test hosts do.
            "ssh_server": " ".join(os.environ.get("SSH_CONNECTION", "").split()[2:4]),
            # Set by the controller for a job that may restart (--max-restarts): 0, 1, ...
            "restart_count": os.environ.get("CLUSTERLAUNCH_RESTART_COUNT"),
        }
        name = "%s.n%d.%d.%s.json" % (args.job_id, args.node_rank, me, start)
        path = os.path.join(folder, name)
        temporary = path + ".tmp"
        try:  # checked writable just before (prepare_scratch): only a race fails here
            with open(temporary, "w") as handle:
                handle.write(to_json(record))
            os.replace(temporary, path)
        except OSError:
            return None
        return cls(path, args.job_id, record["restart_count"] is not None)

    def remove(self):
        """The job has ended here. One that may restart (``--max-restarts``) leaves a note,
        so ``kill`` between its attempts knows it; one that may not takes its kill mark."""
        _remove(self.path)
        if self.may_restart:
            _touch(self.job_id + _ENDED)
        elif self.job_id is not None:
            _remove_notes(self.job_id, (_KILLED,))


TEMP_PREFIX = "/tmp/clusterlaunch-"
_KILLED = ".killed"
_ENDED = ".ended"  # an attempt of a job that may restart ended here
NOTE_KEEP_S = 86400.0
"""A job's notes outlive its last record this long: a restart comes after its backoff,
connect, setup and preflight (minutes); then they are swept, never read again."""


def mark_killed(job_id):
    """Leave word that ``job_id`` was killed: a restart of it (``--max-restarts``) that
    has not started yet finds this in its preflight and does not start. Only for a job
    that runs here or ran here and may restart: a mistyped id leaves nothing."""
    if not any(r["job_id"] == job_id for r in live_records()) and not _notes(job_id, _ENDED):
        return False
    return _touch(job_id + _KILLED)


def _touch(name):
    folder = private_state_dir()
    if folder is None:
        return False
    with open(os.path.join(folder, name), "w"):
        return True


def _notes(job_id, suffix):
    return [
        p for p in (os.path.join(f, job_id + suffix) for f in state_dirs()) if os.path.exists(p)
    ]


def _remove_notes(job_id, suffixes):
    for suffix in suffixes:
        for path in _notes(job_id, suffix):
            _remove(path)


def _remove(path):
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


def live_records():
    """Records whose agent still runs. Those of dead agents are cleaned up on the way.

    An agent that was SIGKILLed (or lost with its host) could not remove its
    record or its job's temporary directory; whoever reads the records next
    (``ps``, ``kill``, or any agent finishing) does it for it.
    """
    return _sweep(_record_files())


def clean_up_after_dead_agents():
    """What :func:`live_records` cleans, for an agent that is finishing: only the
    records whose name does not show a live agent are read.

    On a machine that plays many hosts, every finishing agent found the others'
    records and read each one (importing json): 11 ms of CPU per agent with 32
    simulated hosts, O(hosts²) in all. A record's name carries its agent's PID and
    start time, so a live one is told by one read of /proc/PID/stat.
    """
    _sweep([p for p in _record_files() if not _agent_alive_by_name(os.path.basename(p))])
    _sweep_old_notes()


def _sweep_old_notes():
    """Remove the notes of jobs that ended here more than :data:`NOTE_KEEP_S` ago."""
    old = time.time() - NOTE_KEEP_S
    for folder in state_dirs():
        try:
            names = [n for n in os.listdir(folder) if n.endswith((_KILLED, _ENDED))]
        except OSError:
            continue
        for path in (os.path.join(folder, name) for name in names):
            try:
                if os.lstat(path).st_mtime < old:
                    os.unlink(path)
            except OSError:
                continue


def _sweep(paths):
    """The records at ``paths`` whose agent still runs; the others are cleaned up."""
    records = []
    for path in paths:
        record = _read_record(path)
        if record is None:
            continue
        if process_start_time(record.get("agent_pid", -1)) == record.get("agent_start"):
            records.append(record)
        else:
            _clean_up_after(record, path)
    return records


def _agent_alive_by_name(name):
    """True if ``JOB.nK.PID.START.json`` names a live agent. False when it names a
    dead one, or the name does not say (a record of an older version, or a PID
    whose start time could not be read: ``None``)."""
    parts = name.rsplit(".", 3)
    if len(parts) != 4 or not (parts[1].isdigit() and parts[2].isdigit()):
        return False
    return process_start_time(int(parts[1])) == int(parts[2])


def _read_record(path):
    """The record at ``path``, or None if it is unreadable (gone, half written by a crash)."""
    import json  # here: a finishing agent reads only dead agents' records; json costs 4-6 ms

    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _record_files():
    paths = []
    for folder in state_dirs():
        try:
            info = os.lstat(folder)
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        if info.st_uid == os.getuid():  # never read records from a directory someone planted
            paths += [os.path.join(folder, n) for n in names if n.endswith(".json")]
    return paths


def _clean_up_after(record, path):
    tail_dir = record.get("tail_dir")
    # Only a directory the record names, in the shape the planner gives it,
    # owned by us: a record file is never trusted to delete anything else.
    if isinstance(tail_dir, str) and tail_dir.startswith(TEMP_PREFIX) and "/.." not in tail_dir:
        try:
            if os.lstat(tail_dir).st_uid == os.getuid():
                import shutil

                shutil.rmtree(tail_dir, ignore_errors=True)
        except OSError:
            pass
    try:
        os.unlink(path)
    except OSError:
        pass


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
