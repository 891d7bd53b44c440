"""Whether a host can hold a job's files: its record and claim, and torchrun's per-rank files.

The record and the claim live in this user's private state dir (``remote/records.py``:
``/run/user/UID/clusterlaunch`` where that exists, else ``/tmp/clusterlaunch-UID``);
torchrun's per-rank files in ``/tmp/clusterlaunch-UID`` always (``remote/claims.py``:
not in RAM). A read-only or full /tmp, or a folder another user owns, passed the
preflight: the job then failed at its record (a traceback), ran without one (``ps`` and
``kill`` could not see it), or its ranks could not write their output. (How much room is
left there is reported as it is, ``diskspace.rank_files_space``, and judged by the
controller, ``core/rankdisk.py``.)
"""

import os

from clusterlaunch.remote.claims import rank_files_root  # bundle: strip
from clusterlaunch.remote.records import private_dir, record_folder  # bundle: strip

_RECORDS = "each job's record (for ps and kill)"
RANK_FILES = "torchrun's per-rank files"


def write_problem(folder, holds=_RECORDS):
    """Why this user cannot write a small file in ``folder`` (made 0700 if missing), or None.

    A read-only /tmp, or a full one (a tmpfs takes the name, then refuses the data),
    passed the preflight: the job then failed at its record (a traceback) or torchrun's
    per-rank files.
    """
    path = os.path.join(folder, ".write-check.%d" % os.getpid())
    try:
        os.makedirs(folder, 0o700, exist_ok=True)
        try:
            with open(path, "w") as handle:
                handle.write(" " * 4096)
        finally:
            if os.path.lexists(path):
                os.unlink(path)
    except OSError as exc:
        return cannot_write(folder, exc, holds=holds)
    return None


def cannot_write(path, exc, doing="write in", holds=_RECORDS):
    said = "cannot %s %s (%s); it holds %s" % (doing, path, exc.strerror or exc, holds)
    return said + ": free space in it, or make it writable for this user"


def scratch_problem(rank_files=False):
    """Why this user's folders cannot hold a job's record and claim, and for torchrun
    (``rank_files``) its per-rank files, or None.

    A folder that is there but not this user's private one is said so first: written to,
    another user's (root's) folder refused with a hint about free space.
    """
    records = record_folder()  # found once: each look makes and lstats the state dirs
    ranks = rank_files_root() if rank_files else records
    if ranks == records:  # no /run/user/UID: one folder holds them all
        holds = [(records, _RECORDS + (" and " + RANK_FILES if rank_files else ""))]
    else:
        holds = [(records, _RECORDS), (ranks, RANK_FILES)]
    for folder, what in holds:
        if os.path.lexists(folder) and not private_dir(folder):
            return record_folder_problem(folder, folder != records)
        why = write_problem(folder, what)
        if why is not None:
            return why
    return None


def record_folder_problem(folder, rank_files_only=False):
    """Why ``folder`` (:func:`record_folder`'s, or :func:`claims.rank_files_root` where
    that is another) is not this user's private one.

    Another user's ``/tmp/clusterlaunch-UID`` (or one others may write in) is never
    written to; root could write there all the same, so the job ran untracked, and
    ``ps`` said "no jobs" (exit 0). Nor are torchrun's per-rank files kept where another
    user could read, plant or replace them.
    """
    said = "%s is not this user's private folder (another user owns it, or others may " % folder
    if rank_files_only:
        said += "write in it), so torchrun's per-rank files cannot be kept there: "
    else:
        said += "write in it), so ps and kill could not find the job: "
    return said + "remove it, or make it this user's with mode 0700"
