"""One job of an id at a time per user and host: the claim each agent takes as it starts.

Stdlib only, bundled with the agent, the probe and jobctl. Asking the hosts first
(``ps``'s way) left a gap between the question and the start: two ``exec --job-id X``
started together both ran, and ``ps`` listed X twice. A claim leaves none.

A claim is a symbolic link ``ID@PLACE.claim`` in the user's private state dir
(:func:`records.private_state_dir`, 0700: no other user can take, plant or block it), its
target naming the agent that holds it: ``PID.START.NODE`` (PID, start time in clock ticks,
node rank). ``os.symlink`` fails where the name exists, so of two agents only one holds
it, whatever the timing. PLACE is the sshd address and port the agent's session came in
on (hosts simulated on one machine are each a place of their own), or without SSH
(``localhost``, ``srun``) the node rank.

The holder's folder for torchrun's per-rank files, ``ID@PLACE``, is in
``/tmp/clusterlaunch-UID`` (:func:`rank_files_dir`), not next to the claim: every byte
every rank writes passes through those files (they hold what the agent has not sent yet:
``diskspace.py``), and the state dir is ``/run/user/UID`` where that exists, a tmpfs in
RAM that systemd caps at 10% of it, where a chatty job's ranks would fail to write
(ENOSPC). ``/tmp`` is what torchrun's own default uses. Like the state dirs, it is never
taken from the environment (``TMPDIR``): whoever sweeps a dead holder's claim (another
agent, ``ps``, ``kill``, after a ``setup:`` of its own) must find its files where the
holder made them.
Where no ``/run/user/UID`` exists, the two folders are one.

A claim whose agent is gone (its PID and start time no longer match: SIGKILLed, or its
host rebooted) blocks nothing: the next claimant replaces it, and finishing agents and
``kill`` sweep it, files and all; under a lock, so a claim is only ever removed as it was
read.
"""

import os
import stat
import time

from clusterlaunch.remote.recordfiles import digits, live_records_of  # bundle: strip
from clusterlaunch.remote.records import (  # bundle: strip
    private_state_dir,  # bundle: strip
    process_start_time,  # bundle: strip
    state_dirs,  # bundle: strip
    this_hosts,  # bundle: strip
)  # bundle: strip

CLAIM = ".claim"
_LOCK = ".claims.lock"
LET_GO_S = 2.0
"""How long a live holder is given to let go before the id counts as taken: the agents of
a restart's layout that was just dropped end on their channel's close, as the next
layout's start on the same hosts."""


def place(node_rank):
    """Where on this machine the agent runs: in a Slurm job step its node's name (the step
    may carry the controller's ``SSH_CONNECTION``), else the sshd's "ADDR_PORT", else
    "nRANK"."""
    node = os.environ.get("SLURMD_NODENAME")
    if node:
        return "slurm-" + node
    server = os.environ.get("SSH_CONNECTION", "").split()[2:4]
    return "_".join(server) if len(server) == 2 else "n%d" % node_rank


class Claim:
    """This agent's claim of its job id here, from :meth:`take` to :meth:`remove`."""

    def __init__(self, path, target):
        self.path = path
        self.target = target
        self.tail_dir = rank_files_dir(os.path.basename(path))

    @classmethod
    def take(cls, job_id, node_rank, let_go_s=LET_GO_S):
        """``(claim, None)``, or ``(None, holder)`` when a live agent holds the id here
        (``{"pid", "node"}``) and keeps it ``let_go_s`` seconds; ``(None, None)`` without a
        private state dir (the preflight and the agent's start say why). Raises OSError
        when the folder refuses the link."""
        folder = private_state_dir()
        if folder is None:
            return None, None
        name = "%s@%s%s" % (job_id, place(node_rank), CLAIM)
        path = os.path.join(folder, name)
        me = os.getpid()
        target = "%d.%s.%d" % (me, process_start_time(me), node_rank)
        deadline = time.monotonic() + let_go_s
        for _ in range(64):  # each round, another agent took or released it
            try:
                os.symlink(target, path)
            except FileExistsError:
                seen = _read(path)
                holder = _holder(seen)
                if holder is None or not _alive(holder):
                    _drop_if_unchanged(folder, path, seen)  # stale, or just released: again
                    continue
            else:
                holder = _holder_elsewhere(job_id, name, folder)
                if holder is None:
                    return cls(path, target), None
                os.unlink(path)  # just made, ours: nobody removes a live agent's claim
            if time.monotonic() >= deadline:
                return None, {"pid": holder[0], "node": holder[2]}
            time.sleep(0.05)
        raise FileExistsError("%s keeps changing" % path)

    def make_tail_dir(self):
        """The folder torchrun writes the per-rank files to, made empty, 0700, in
        :func:`rank_files_root` (checked private and writable just before: ``scratch.py``)."""
        _remove_rank_files(self.tail_dir)  # a dead holder's, never swept: it is ours now
        os.mkdir(self.tail_dir, 0o700)
        return self.tail_dir

    def remove(self):
        """Release it (the job has ended here): its files go, then the claim. Nobody else
        removes a claim whose agent lives, so the one at ``path`` is still ours."""
        _remove_rank_files(self.tail_dir)
        if _read(self.path) == self.target:
            _remove_tree(self.path)


def rank_files_root():
    """Where this user's per-rank folders are: ``/tmp/clusterlaunch-UID`` (see above)."""
    return state_dirs()[-1]


def rank_files_dir(claim_name):
    """The per-rank files' folder of the claim named ``claim_name`` (``ID@PLACE.claim``)."""
    return os.path.join(rank_files_root(), claim_name[: -len(CLAIM)])


def holder_of(job_id, node_rank):
    """The live agent holding ``job_id`` at this place (``{"pid", "node"}``), or None."""
    holder = _holder_elsewhere(job_id, "%s@%s%s" % (job_id, place(node_rank), CLAIM))
    return {"pid": holder[0], "node": holder[2]} if holder else None


def _holder_elsewhere(job_id, name, mine=None):
    """A live agent other than the claim ``name`` in folder ``mine`` that holds ``job_id``
    at this place: ``(pid, start, node)``, or None.

    Each of :func:`records.state_dirs` is looked at, not only the one claims are made in
    now: ``/run/user/UID`` that appeared while a job ran (a login with ``pam_systemd``)
    made the first folder another, and a second job of the id ran (and removed the first
    one's rank files, which both name alike). So is every live record of the id that no
    claim speaks for: a job of clusterlaunch before the claims, which made none.
    """
    claimants = set()
    for folder, other, holder in _live_claims_of(job_id):
        claimants.add(holder[:2])
        if other == name and folder != mine:
            return holder
    for record in this_hosts(live_records_of(job_id)):
        if "unreadable" in record:  # names no place: no telling it is this one's
            continue
        if (record["agent_pid"], record["agent_start"]) not in claimants:
            return record["agent_pid"], record["agent_start"], record["node_rank"]
    return None


def _live_claims_of(job_id):
    """``(folder, name, holder)`` of every live claim of ``job_id``, in every state dir."""
    found = []
    for folder in _own_state_dirs():
        try:
            names = [n for n in os.listdir(folder) if n.startswith(job_id + "@")]
        except OSError:
            continue
        for name in names:
            holder = _holder(_read(os.path.join(folder, name)))
            if name.endswith(CLAIM) and holder is not None and _alive(holder):
                found.append((folder, name, holder))
    return found


def _own_state_dirs():
    """The state dirs that are this user's: never one someone planted."""
    mine = []
    for folder in state_dirs():
        try:
            if os.lstat(folder).st_uid == os.getuid():
                mine.append(folder)
        except OSError:
            continue
    return mine


def live_claims():
    """Every live claim of this user on this machine, as ``{"job_id", "node_rank",
    "agent_pid", "agent_start", "ssh_server"}``; dead agents' claims are removed, files and
    all (an agent SIGKILLed in its setup or preflight never started: it has no record)."""
    claims = []
    for folder in _own_state_dirs():
        try:
            names = [name for name in os.listdir(folder) if name.endswith(CLAIM)]
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            seen = _read(path)
            holder = _holder(seen)
            if holder is not None and _alive(holder):
                claims.append(_described(name, holder))
            elif seen is not None:
                _drop_if_unchanged(folder, path, seen)
    return claims


def _described(name, holder):
    job_id, _, where = name[: -len(CLAIM)].partition("@")
    addr, _, port = where.rpartition("_")
    server = "%s %s" % (addr, port) if addr and digits(port) else ""
    return {
        "job_id": job_id,
        "node_rank": holder[2],
        "agent_pid": holder[0],
        "agent_start": holder[1],
        "ssh_server": server,
    }


def _read(path):
    try:
        return os.readlink(path)
    except OSError:
        return None


def _holder(target):
    """``(pid, start, node)`` from a claim's target, or None (gone, or not one of ours)."""
    parts = (target or "").split(".")
    if len(parts) != 3 or not all(map(digits, parts)):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def _alive(holder):
    return process_start_time(holder[0]) == holder[1]


def _drop_if_unchanged(folder, path, seen):
    """Remove the dead claim ``seen`` at ``path`` and its files, unless the claim changed
    since it was read (taken over, released). ``seen`` None: whatever is there is no claim."""
    import fcntl  # here: only a stale claim needs the lock

    lock = os.open(os.path.join(folder, _LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _read(path) != seen or os.path.islink(path) != (seen is not None):
            return  # changed meanwhile (a new claim, if a link: never removed here)
        if seen is None:
            _remove_tree(path)  # not a link (nor a claim): in the way of one
            return
        name = os.path.basename(path)
        job_id = name.partition("@")[0]
        if not any(n == name and f != folder for f, n, _ in _live_claims_of(job_id)):
            _remove_rank_files(rank_files_dir(name))  # its files (not a live namesake's)
        os.unlink(path)
    finally:
        os.close(lock)


def _remove_rank_files(path):
    """Remove the per-rank folder ``path``, only from this user's own folder (in ``/tmp``,
    another user may have made one of that name: nothing in it is ours to remove)."""
    try:
        info = os.lstat(os.path.dirname(path))
    except OSError:
        return
    if info.st_uid == os.getuid() and stat.S_ISDIR(info.st_mode):
        _remove_tree(path)


def _remove_tree(path):
    """Remove ``path``: a folder with all it holds, or a file."""
    if os.path.isdir(path) and not os.path.islink(path):
        import shutil  # only now: slow to import, and an exec has no files to remove

        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        try:
            os.unlink(path)
        except OSError:
            pass
