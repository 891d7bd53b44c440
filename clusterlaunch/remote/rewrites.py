"""A rank file rewritten behind the agent: a rank that opened /dev/stdout or /dev/stderr.

Stdlib only, bundled with the agent (``tail.py`` uses it). Each rank's stdout and stderr
are regular files (torchrun's ``--redirects 3``). A rank that opens ``/dev/stderr`` for
writing (``echo msg > /dev/stderr``, ``open("/dev/stderr", "w")``, ``tee /dev/stderr``)
opens that same file again, with ``O_TRUNC``: what the agent had not read yet is gone,
what is written through the new open file lands at the file's start, behind the agent's
offset, and the next write through the rank's own descriptor (no ``O_APPEND``) leaves a
gap of NUL bytes up to its old offset. Over plain ssh, where the descriptor is a pipe, the
same program lost nothing.

What cannot be had back cannot be sent; the rest can. :class:`RewriteWatch` notices the
file was emptied behind the agent's offset (shorter than that offset, or other bytes just
before it and at its start), so the agent reads it again from its start (the new open's
lines), and :meth:`RewriteWatch.pass_on` leaves out the NUL bytes of such a gap: in a
file found rewritten, every NUL (until then a rank's NULs pass as written: binary output
is output). It is said once per file (the ``rewritten`` event: the rank, its stream and
the fix, ``>&2`` or ``sys.stderr``, not ``/dev/stderr``).
"""

import os

CHECK_BYTES = 64
"""The last bytes read of each file, compared with the file's own before each read is
taken: a file rewritten with other text than the agent read differs there. 64 bytes: a
line or so. The checks cost a read that found something one ``pread`` (0.65 us here, where
a 256 KiB read takes 4.2), one that found nothing an ``fstat`` (1.1 us)."""
NUL = b"\0"


class RewriteWatch:
    """One rank file's guard against a rewrite behind the agent's offset."""

    def __init__(self, rank, stream):
        self.rank = rank
        self.stream = stream  # "stdout" or "stderr"
        self.first = b""  # the file's first CHECK_BYTES bytes, as read
        self.last = b""  # the last CHECK_BYTES bytes read
        self.said = False
        self.found = False  # found rewritten: every NUL run is a gap

    def emptied(self, fd, offset, freed, read_nothing):
        """Whether the file of ``fd`` was emptied since the agent read it up to ``offset``
        (``freed``: where its punched-out start ends, which reads as zeros), to be read
        again from its start. One ``fstat`` when a read found nothing new (a file cut
        shorter), one ``pread`` of at most :data:`CHECK_BYTES` after one that found
        something: other bytes before ``offset`` than were read, and, a second ``pread``,
        at its start too (a rank's ``>> /dev/stderr`` that its next write covered changes
        only the end: said, not read again, which would send the file twice)."""
        try:
            if read_nothing:
                return os.fstat(fd).st_size < offset
            span = offset - freed  # the later half at most: the start is compared apart
            size = min(len(self.last), span - span // 2)
            if size <= 0 or os.pread(fd, size, offset - size) == self.last[-size:]:
                return False
            self.found = True
            start = self.first[: offset - size] if not freed else NUL * CHECK_BYTES
            return not start or os.pread(fd, len(start), 0) != start
        except OSError:
            return False

    def restart(self):
        """The agent reads the file again from its start."""
        self.first = self.last = b""
        self.found = True

    def pass_on(self, data):
        """``data`` as read; in a file found rewritten, without the NUL bytes of its gap
        (until then a rank's NULs pass as written: binary output is output too)."""
        kept = data.replace(NUL, b"") if self.found and NUL in data else data
        self.last = (self.last + data)[-CHECK_BYTES:]
        if len(self.first) < CHECK_BYTES:  # reads go on from the start, in order
            self.first += data[: CHECK_BYTES - len(self.first)]
        return kept

    def news(self):
        """The ``rewritten`` event the first time the file was found rewritten, else None."""
        if not self.found or self.said:
            return None
        self.said = True
        return {"event": "rewritten", "rank": self.rank, "stream": self.stream}
