"""The disk under torchrun's per-rank files: what is free there, what was read given back.

Stdlib only, bundled with the agent, the probe and the doctor. Each worker writes its
stdout and stderr to files in the agent's folder in ``/tmp/clusterlaunch-UID``
(``claims.py``), which the agent tails (``tail.py``). Kept whole for the whole job, they
grew by every byte a rank wrote: a chatty job of days filled ``/tmp``, the ranks' writes
failed (ENOSPC), and their output, the error that ended them included, was lost, with a
bare "exited with code 1" for a summary.

So the agent punches out of each file what it has read and queued for the controller
(``fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)``: the blocks go, the size and
every offset stay, so the writer and the reader both carry on): the files hold on disk
only what the controller has not been sent yet. Where the file system cannot
(EOPNOTSUPP), the files are kept whole, as before. And it looks at the free space there
as it rescans for new files, and when the job ends with an error: a full folder is said
(the ``full`` event), and the controller names it as the likely cause of a failure.
"""

import os
import sys

from clusterlaunch.remote.claims import rank_files_root  # bundle: strip
from clusterlaunch.remote.proctree import libc_errno, libc_function  # bundle: strip

FALLOC_FL_KEEP_SIZE = 0x01  # <linux/falloc.h>
FALLOC_FL_PUNCH_HOLE = 0x02
EINTR = 4
PUNCH_STEP = 1 << 20
"""Read bytes are given back in whole steps of this size, aligned to it (a range smaller
than a block would only be zeroed): a file keeps less than this of what was sent. With
64 KiB steps, punching cost the agent's loop 1.4 times its CPU per MiB, with 1 MiB 1.1
(16 KiB reads; ``python -m benchmarks.rank_files``, docs/architecture.md)."""
FULL_BELOW = 1 << 20
"""Less free than this where the rank files are: the folder is full. Not 0: as the agent
punches out what it read, a full disk gets a few blocks back now and then, which the
ranks' next writes take; the preflight refuses far more than this
(``core/defaults.RANK_FILES_MIN_FREE``)."""


def free_bytes(path):
    """Bytes this user may still write in ``path``'s file system (root: with the blocks kept
    for root, which it may fill), or None where it cannot be told: the call fails, or the
    file system has no size (ramfs says 0 of 0 blocks free, and takes all it is given). A
    ``path`` not there yet: its nearest folder that is."""
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    try:
        info = os.statvfs(path)
    except OSError:
        return None
    if not info.f_blocks:
        return None
    return (info.f_bfree if os.geteuid() == 0 else info.f_bavail) * info.f_frsize


def rank_files_space():
    """Where torchrun's per-rank files go on this host and how much is free there (the
    preflight's and the doctor's report: ``core/rankdisk.py`` judges it)."""
    folder = rank_files_root()
    return {"folder": folder, "free": free_bytes(folder)}


class HolePuncher:
    """Frees byte ranges of files; from the first refusal on (EOPNOTSUPP: a file system
    without hole punching), it no longer tries."""

    def __init__(self):
        self.fallocate = None  # libc's, found at the first punch
        self.works = True

    def punch(self, fd, start, end):
        """Give back the blocks of ``fd``'s bytes ``start``..``end`` (its size stays); True
        if they were."""
        if not self.works or end <= start:
            return False
        try:
            if self.fallocate is None:  # 64-bit off_t: fallocate64 on a 32-bit libc
                name = "fallocate" if sys.maxsize > 2**32 else "fallocate64"
                self.fallocate = libc_function(name, "iiqq")
            mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
            failed = self.fallocate(fd, mode, start, end - start) != 0
        except (ImportError, OSError, AttributeError):  # no libc function to call
            self.works = False
            return False
        if failed and libc_errno() != EINTR:  # EOPNOTSUPP, ENOSYS: the files stay whole
            self.works = False
        return not failed


class FullWatch:
    """Whether the rank files' folder is full, said once (the agent's ``full`` event)."""

    def __init__(self, folder):
        self.folder = folder
        self.free = None  # what was free when it was found full
        self.told = False

    def look(self):
        """One ``statvfs`` (a few microseconds), until the folder was found full."""
        if self.free is None:
            free = free_bytes(self.folder)
            if free is not None and free < FULL_BELOW:
                self.free = free

    def news(self):
        """The ``full`` event's fields the first time it was found full, else None."""
        if self.free is None or self.told:
            return None
        self.told = True
        return {"event": "full", "folder": self.folder, "free": self.free}
