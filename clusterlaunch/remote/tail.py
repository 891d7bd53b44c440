"""Byte-exact tailing of the per-rank files torchrun writes (stdlib only).

torchrun's own ``--tee`` reads these files in text mode: it turns ``\\r`` into
``\\n`` and splits a line that is half-written when it polls. We read them as
bytes and let the controller split lines, so nothing is changed or lost.
Layout (torchrun ``--log-dir D --redirects 3``):
``D/<run_id>_<rand>/attempt_<n>/<local_rank>/{stdout,stderr}.log``.
"""

import os
import time

TAIL_RESCAN_S = 0.2


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _number_suffix(name):
    digits = name.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1


class RankTail:
    """Follows every rank's stdout/stderr file under ``root``, in discovery order."""

    def __init__(self, root, first_rank):
        self.root = root
        self.first_rank = first_rank
        self.files = {}  # path -> (fd, tag)
        self.order = []
        self.next_scan = 0.0

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
        rank = str(self.first_rank + local_rank).encode()
        for name, kind in (("stdout.log", b"o"), ("stderr.log", b"e")):
            path = os.path.join(rank_dir, name)
            if path in self.files:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            self.files[path] = (fd, kind + rank)
            self.order.append(path)

    def poll(self, budget):
        """New bytes of every file, at most ``budget`` per file: [(tag, data)]."""
        now = time.monotonic()
        if now >= self.next_scan:
            self.scan()
            self.next_scan = now + TAIL_RESCAN_S
        chunks = []
        for path in self.order:
            fd, tag = self.files[path]
            try:
                data = os.read(fd, budget)
            except OSError:
                continue
            if data:
                chunks.append((tag, data))
        return chunks

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
