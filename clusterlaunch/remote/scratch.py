"""Whether a host can hold a job's files: its record, its claim and torchrun's per-rank files.

All of them live in this user's private state dir (``remote/records.py``). A read-only
or full /tmp, or a record folder another user owns, passed the preflight: the job then
failed at its record (a traceback), or ran without one (``ps`` and ``kill`` could not
see it).
"""

import os

from clusterlaunch.remote.records import private_dir, record_folder  # bundle: strip


def write_problem(folder):
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
        return cannot_write(folder, exc)
    return None


def cannot_write(path, exc, doing="write in"):
    return (
        "cannot %s %s (%s); it holds each job's record (for ps and kill) and "
        "torchrun's per-rank files: free space in it, or make it writable for this user"
        % (doing, path, exc.strerror or exc)
    )


def scratch_problem():
    """Why this user's state folder cannot hold a job's record and files here, or None.

    One that is there but not this user's private one is said so first: written to,
    another user's (root's) folder refused with a hint about free space.
    """
    folder = record_folder()  # found once: each look makes and lstats the state dirs
    if os.path.lexists(folder) and not private_dir(folder):
        return record_folder_problem(folder)
    return write_problem(folder)


def record_folder_problem(folder):
    """Why ``folder`` (:func:`record_folder`'s) is not this user's private one.

    Another user's ``/tmp/clusterlaunch-UID`` (or one others may write in) is never
    written to; root could write there all the same, so the job ran untracked, and
    ``ps`` said "no jobs" (exit 0).
    """
    return (
        "%s is not this user's private folder (another user owns it, or others may "
        "write in it), so ps and kill could not find the job: remove it, or make it "
        "this user's with mode 0700" % folder
    )
