"""Reading the job records (``remote/records.py`` writes them) and sweeping dead agents'
(stdlib only): ``ps``, ``kill``, the preflight and every finishing agent read them here.

A record's name says whose it is, ``JOB.nK.PID.START.json``; its content is JSON that
anything can overwrite or cut short (the state dir is the user's own). A record whose
content is not one is never counted live from its content: a ``{}`` read as live (no PID
and no start time matched "gone" and "unknown") was never swept, and one without a job id
gave ``ps`` a traceback on every host of the machine.
"""

import os
import stat

from clusterlaunch.remote.records import (  # bundle: strip
    process_start_time,  # bundle: strip
    remove_file,  # bundle: strip
    started_at,  # bundle: strip
    state_dirs,  # bundle: strip
    sweep_old_notes,  # bundle: strip
)  # bundle: strip

RECORD = ".json"
OLD_RANK_FOLDER = "/tmp/clusterlaunch-%s-n%d"
"""Where clusterlaunch before the claims (``remote/claims.py``) had torchrun write a node's
per-rank files: named by the job id and node rank alone, in ``/tmp`` itself."""


def digits(text):
    """Whether ``text`` is ASCII digits alone, as ``int()`` takes them in names we made
    (``isdigit`` alone takes "²", which ``int()`` refuses: a planted name raised)."""
    return text.isascii() and text.isdigit()


def parse_name(name):
    """``{"job_id", "node_rank", "agent_pid", "agent_start"}`` from a record's file name
    ``JOB.nK.PID.START.json``, or None: not such a name (a stray file, a record named as
    before the start time was in it)."""
    if not name.endswith(RECORD):
        return None
    parts = name[: -len(RECORD)].rsplit(".", 3)
    if len(parts) != 4 or not parts[0] or parts[1][:1] != "n":
        return None
    node, pid, start = parts[1][1:], parts[2], parts[3]
    if not all(map(digits, (node, pid, start))):
        return None
    return {
        "job_id": parts[0],
        "node_rank": int(node),
        "agent_pid": int(pid),
        "agent_start": int(start),
    }


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def usable(record):
    """True if ``record`` (read from JSON) has what ``ps`` and ``kill`` rely on, each of its
    type: job id, node rank, the agent's PID and start time, the job's start."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("job_id"), str)
        and _whole(record.get("node_rank"))
        and _whole(record.get("agent_pid"))
        and record.get("agent_pid") > 0
        and _whole(record.get("agent_start"))
        and isinstance(record.get("started_at"), (int, float))
        and not isinstance(record.get("started_at"), bool)
        and isinstance(record.get("command", []), list)
    )


def read_record(path):
    """The content of the record at ``path``, or None if it is unreadable (gone, not JSON)."""
    import json  # here: a finishing agent reads only dead agents' records; json costs 4-6 ms

    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def old_rank_folder(record):
    """The per-rank folder a record of clusterlaunch before the claims names, if it is one
    and still there as this user's own folder (not a link); else None.

    Only that exact name, of the record's own id and node: a record never names anything
    else to remove. The folders of today's jobs (``ID@PLACE`` in ``/tmp/clusterlaunch-UID``)
    go with their claims, never with a record: the next job of the id may hold them already.
    """
    tail_dir = record.get("tail_dir")
    if "/" in record["job_id"] or tail_dir != OLD_RANK_FOLDER % (
        record["job_id"],
        record["node_rank"],
    ):
        return None
    try:
        info = os.lstat(tail_dir)
    except OSError:
        return None
    return tail_dir if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() else None


def remove_folder(path):
    """Remove the folder ``path`` and all it holds."""
    import shutil  # only now: slow to import, and rarely needed

    shutil.rmtree(path, ignore_errors=True)


def live_records():
    """Records whose agent still runs. Those of dead agents are cleaned up on the way.

    An agent that was SIGKILLed (or lost with its host) could not remove its
    record; whoever reads the records next (``ps``, ``kill``, or any agent
    finishing) does it for it (its files go with its claim: ``remote/claims.py``).
    """
    return _sweep(_record_files())


def live_records_of(job_id):
    """:func:`live_records` of ``job_id`` alone, told by their names: only those are read."""
    return _sweep([p for p in _record_files() if _named(p).get("job_id") == job_id])


def clean_up_after_dead_agents():
    """What :func:`live_records` cleans, for an agent that is finishing: only the
    records whose name does not show a live agent are read.

    On a machine that plays many hosts, every finishing agent found the others'
    records and read each one (importing json): 11 ms of CPU per agent with 32
    simulated hosts, O(hosts²) in all. A record's name carries its agent's PID and
    start time, so a live one is told by one read of /proc/PID/stat.
    """
    _sweep([p for p in _record_files() if not _agent_runs(_named(p))])
    sweep_old_notes()


def _sweep(paths):
    """The records at ``paths`` whose agent still runs; the others are cleaned up.

    A file whose content is no record counts by its name: a live agent's is listed as
    :func:`_unreadable` (its job runs: ``kill`` must wait for it, ``ps`` show it), a dead
    one's removed; a name not of a record (a stray ``junk.json``) is not ours to remove.
    """
    records = []
    for path in paths:
        record, named = read_record(path), _named(path)
        if not usable(record):
            if not os.path.lexists(path):
                continue  # removed since listed: its agent is finishing, its job ended here
            if _agent_runs(named):
                records.append(_unreadable(named, path))
            elif named:
                remove_file(path)
        elif _agent_runs(record):
            records.append(record)
        else:
            _clean_up_after(record, path)
    return records


def _named(path):
    """What a record's file name says (:func:`recordfiles.parse_name`), ``{}`` if nothing."""
    return parse_name(os.path.basename(path)) or {}


def _agent_runs(agent):
    """True if the agent ``{"agent_pid", "agent_start"}`` still runs (``{}``: not known)."""
    pid = agent.get("agent_pid")
    return pid is not None and process_start_time(pid) == agent.get("agent_start")


def _unreadable(named, path):
    """A live agent's record that cannot be read (cut short, overwritten): what its name
    says, started when its agent did, its command unknown."""
    return dict(named, started_at=started_at(named["agent_pid"]) or 0.0, unreadable=path)


def _clean_up_after(record, path):
    """Remove a dead agent's record; first the per-rank folder it names if it was written by
    clusterlaunch before the claims (their folders went with their records) and no live
    agent of its job and node is left to use the folder."""
    folder = old_rank_folder(record)
    if folder is not None and not any(_agent_runs(n) for n in _names_of(record)):
        remove_folder(folder)
    remove_file(path)


def _names_of(record):
    """What the names of the records of ``record``'s job and node say."""
    whose = (record["job_id"], record["node_rank"])
    named = [_named(path) for path in _record_files()]
    return [n for n in named if (n.get("job_id"), n.get("node_rank")) == whose]


def _record_files():
    paths = []
    for folder in state_dirs():
        try:
            info = os.lstat(folder)
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        if info.st_uid == os.getuid():  # never read records from a directory someone planted
            paths += [os.path.join(folder, n) for n in names if n.endswith(RECORD)]
    return paths
