"""Reading the job's output as bytes (stdlib only): its pipes and the per-rank files.

torchrun's own ``--tee`` reads the rank files in text mode: it turns ``\\r``
into ``\\n`` and splits a line that is half-written when it polls. We read them
as bytes and let the controller split lines, so nothing is changed or lost.
Layout (torchrun ``--log-dir D --redirects 3``):
``D/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log``.

Once the job's last process is gone, :meth:`RankTail.freeze` and
:meth:`JobPipes.read_rest` let the agent read everything to its end: what is
there then is all the job ever wrote. What the agent has read and queued goes back
to the disk (:meth:`RankTail.free_sent`), and a full folder is said (``diskspace.py``). A
file a rank rewrote (it opened ``/dev/stderr``) is read again from its start, without the
gap of NULs that leaves, and said (``rewrites.py``).
"""

import fcntl
import os
import sys
import time

from clusterlaunch.core.protocol import (  # bundle: strip
    EVENT,  # bundle: strip
    JOB_STDERR,  # bundle: strip
    JOB_STDOUT,  # bundle: strip
    rank_tag,  # bundle: strip
    to_json,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.diskspace import PUNCH_STEP, FullWatch, HolePuncher  # bundle: strip
from clusterlaunch.remote.rewrites import RewriteWatch  # bundle: strip

TAIL_RESCAN_S = 0.2
ERR_TAIL = 65536  # the job's last stderr bytes, for torchrun's root-cause block
# The job's pipes hold 1 MiB instead of Linux's default 64 KiB (the most an
# unprivileged process may ask for by default: /proc/sys/fs/pipe-max-size). With
# 64 KiB, a job writing fast blocked every 64 KiB, and the agent woke, read and
# framed per 64 KiB: 10M lines through exec on one host took 1.045 -> 0.964 s
# (medians of 8 paired runs; 1.206 -> 1.059 s in 10 more). A larger pipe holds
# nothing back: the agent reads whatever is there whenever it is readable.
JOB_PIPE_BYTES = 1 << 20
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux's; Python 3.10+ names it


def with_log_dir(argv, path):
    """torchrun's ``argv`` with its ``--log-dir`` (the plan's ``AUTO``) set to ``path``: the
    first one, the planner's (``--torchrun-args`` may not hold one; the script's come after)."""
    if "--log-dir" not in argv[1:]:
        return argv
    at = argv.index("--log-dir", 1) + 1
    return [*argv[:at], path, *argv[at + 1 :]]


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _number_suffix(name):
    digits = name.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1


def _open(path):
    """``path`` open to read and to punch holes in (for writing: we write nothing), or only
    to read where this user may not write it (the files are then kept whole)."""
    try:
        return os.open(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def enlarge_pipe(fd, size):
    """Let pipe ``fd`` hold ``size`` bytes where Linux allows it.

    Best effort: the pipe keeps its size where Linux refuses (a user over its
    pipe-user-pages limit, a lower pipe-max-size) and on other systems.
    """
    if sys.platform.startswith("linux"):
        try:
            fcntl.fcntl(fd, F_SETPIPE_SZ, size)
        except OSError:
            pass


class JobPipes:
    """The job's own stdout/stderr (tags ``O``/``E``), read without blocking."""

    def __init__(self, stdout, stderr):
        self.streams = [(JOB_STDOUT, stdout), (JOB_STDERR, stderr)]
        for _, stream in self.streams:
            os.set_blocking(stream.fileno(), False)
            enlarge_pipe(stream.fileno(), JOB_PIPE_BYTES)
        self.err_tail = bytearray()

    def fds(self):
        """Pipes still open (for select)."""
        return [stream.fileno() for _, stream in self.streams if not stream.closed]

    @property
    def closed(self):
        return all(stream.closed for _, stream in self.streams)

    def read(self, budget, final=False):
        """Available bytes of each pipe, at most ``budget`` each: [(tag, data)].

        A pipe is closed at its end of file. With ``final`` (nobody is left to
        write) an empty pipe counts as ended too: whatever a process wrote
        before it died is in the pipe, and a stray holder of the write end
        must not keep the agent waiting.
        """
        chunks = []
        for tag, stream in self.streams:
            if stream.closed:
                continue
            try:
                data = os.read(stream.fileno(), budget)
            except BlockingIOError:
                if final:
                    stream.close()
                continue
            if not data:
                stream.close()
                continue
            if tag == JOB_STDERR:
                self.err_tail = (self.err_tail + data)[-ERR_TAIL:]
            chunks.append((tag, data))
        return chunks


class RankTail:
    """Follows every rank's stdout/stderr file under ``root``, in discovery order."""

    def __init__(self, root, first_rank):
        self.root = root
        self.first_rank = first_rank
        self.files = {}  # path -> (fd, tag)
        self.order = []
        self.next_scan = 0.0
        self.ends = None  # path -> size to read up to, once frozen
        self.read = {}  # path -> bytes read (and queued) so far
        self.freed = {}  # path -> bytes given back to the disk so far
        self.rewrites = {}  # path -> RewriteWatch
        self.puncher = HolePuncher()
        self.disk = FullWatch(os.path.dirname(root))  # /tmp/clusterlaunch-UID

    def scan(self):
        """Open files that appeared since the last scan (new ranks, restarts)."""
        for run in _listdir(self.root):
            run_dir = os.path.join(self.root, run)
            for attempt in sorted(_listdir(run_dir), key=_number_suffix):
                attempt_dir = os.path.join(run_dir, attempt)
                for local in _listdir(attempt_dir):
                    if local.isdigit():
                        self._open_rank(os.path.join(attempt_dir, local), int(local))

    def _open_rank(self, rank_dir, local_rank):
        rank = self.first_rank + local_rank
        for name, stderr in (("stdout.log", False), ("stderr.log", True)):
            path = os.path.join(rank_dir, name)
            if path in self.files:
                continue
            try:  # read and written: fallocate() frees only through an fd open for writing
                fd = _open(path)
            except OSError:
                continue
            self.files[path] = (fd, rank_tag(stderr, rank))
            self.order.append(path)
            self.read[path] = self.freed[path] = 0
            self.rewrites[path] = RewriteWatch(rank, name[:-4])

    def freeze(self, failed=False):
        """The writers are gone: find every file and note its final size.

        From now on :meth:`poll` reads each file up to that size and no
        further (bounded, even if something we could not stop still appended).
        ``failed``: the job ended with an error; a full folder may be why.
        """
        if failed:
            self.disk.look()
        self.scan()
        self.ends = {}
        for path in self.order:
            if self.rewrites[path].emptied(self.files[path][0], self.read[path], 0, True):
                self._restart(path)
            try:
                self.ends[path] = os.fstat(self.files[path][0]).st_size
            except OSError:
                self.ends[path] = 0

    @property
    def done(self):
        """Frozen, and every file read to its final size."""
        return self.ends is not None and not any(self._left(path) for path in self.order)

    def _left(self, path):
        if self.ends is None:
            return None
        try:
            return max(0, self.ends[path] - os.lseek(self.files[path][0], 0, os.SEEK_CUR))
        except OSError:
            return 0

    def poll(self, budget):
        """New bytes of every file, at most ``budget`` per file, and, once, the ``full`` event
        when their folder is found full (``diskspace.FullWatch``): [(tag, data)], each a
        frame for the agent to queue. What earlier polls read was queued since: it goes
        from the disk first (:meth:`free_sent`)."""
        now = time.monotonic()
        self.free_sent()
        if self.ends is None and now >= self.next_scan:
            self.scan()
            self.disk.look()  # a statvfs: a few microseconds every TAIL_RESCAN_S
            self.next_scan = now + TAIL_RESCAN_S
        chunks = []
        for path in self.order:
            data = self._read(path, budget)
            if data:
                chunks.append((self.files[path][1], data))
            news = self.rewrites[path].news()
            if news is not None:
                chunks.append((EVENT, to_json(news).encode()))
        news = self.disk.news()
        if news is not None:
            chunks.append((EVENT, to_json(news).encode()))
        return chunks

    def _read(self, path, budget):
        """What ``path`` holds past the agent's offset, at most ``budget`` bytes, without a
        rewrite's gap; b"" for nothing new, and where the file was found rewritten behind
        that offset (``rewrites.py``): it is read again from its start from the next poll."""
        fd, offset, left = self.files[path][0], self.read[path], self._left(path)
        if left == 0:
            return b""
        try:
            data = os.read(fd, budget if left is None else min(budget, left))
        except OSError:
            data = b""
        watch = self.rewrites[path]
        if watch.emptied(fd, offset, self.freed[path], read_nothing=not data):
            self._restart(path)
            return b""
        if not data and left:
            self.ends[path] = 0  # unreadable: nothing more to be had
        self.read[path] += len(data)
        return watch.pass_on(data) if data else b""

    def _restart(self, path):
        """Read ``path`` again from its start (what was cut off it is gone; what is there
        now was never read), up to its size now if the writers are gone."""
        os.lseek(self.files[path][0], 0, os.SEEK_SET)
        self.read[path] = self.freed[path] = 0
        self.rewrites[path].restart()
        if self.ends is not None:
            self.ends[path] = os.fstat(self.files[path][0]).st_size

    def free_sent(self):
        """Give back to the disk what was read and sent on, in whole :data:`PUNCH_STEP`
        steps (``diskspace.py``): the files then hold only what is yet to be sent."""
        for path in self.order:
            sent = self.read[path] // PUNCH_STEP * PUNCH_STEP
            # Only what was punched counts (rewrites.py reads it as zeros); a range not
            # punched (EINTR) is tried again at the next poll
            if sent > self.freed[path] and self.puncher.punch(
                self.files[path][0], self.freed[path], sent
            ):
                self.freed[path] = sent

    def remove(self):
        """Close every file and delete the directory (it is ours: we created it)."""
        for fd, _ in self.files.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.files.clear()
        self.order = []
        import shutil  # only now: it is slow to import and the agent starts often

        shutil.rmtree(self.root, ignore_errors=True)
