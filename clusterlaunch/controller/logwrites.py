"""The output router's writes to ``--log-dir``: a file that fails does not cut it short."""

from __future__ import annotations

import contextlib

from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.core.errors import OutputLost
from clusterlaunch.core.lines import OpenLine, prefix_block, without_empty_redraws
from clusterlaunch.core.streammerge import StreamMerge


class LogWrites:
    """The output router's writes to ``--log-dir`` (none without one).

    A file that fails does not cut the router short: the stop it brings waits
    for :meth:`stop_if_lost`, once the console and the other files have their
    copies of all a host's bytes (see ``OutputRouter.stop_if_lost``).
    """

    def __init__(self, log_dir: LogDir | None) -> None:
        self.log_dir = log_dir
        self._stop: OutputLost | None = None
        self._merges: dict[str, StreamMerge] = {}  # files that several streams share
        self._line = OpenLine()  # controller.log's, as the console's (Console.open_line)

    def write(self, name: str, data: bytes) -> bool:
        """``data`` to file ``name``; False when that file is given up (or none is kept)."""
        if self.log_dir is None:
            return False
        try:
            self.log_dir.write(name, data)
        except OutputLost as lost:
            self._stop = lost
        return self.kept(name)

    def write_stream(self, name: str, stream: object, block: bytes) -> None:
        """``stream``'s ``block`` to file ``name``, which other streams share (``rank-N.log``):
        when another stream's long line is open there, after its end (:class:`StreamMerge`)."""
        if self.log_dir is None:
            return
        merge = self._merges.get(name) or self._merges.setdefault(name, StreamMerge())
        for piece in merge.add(stream, block):
            self.write(name, piece)

    def end_stream(self, name: str, stream: object) -> None:
        """``stream`` of file ``name`` has ended: what waited for its open line is written."""
        merge = self._merges.get(name)
        for piece in merge.end(stream) if merge is not None else ():
            self.write(name, piece)

    def host_block(self, prefix: bytes, owner: object, block: bytes, continued: bool) -> bool:
        """A host's block in controller.log, each line with ``prefix``: hosts and messages meet
        there as on the console. False when controller.log is given up (or none is kept):
        the console must show what it lost."""
        if self.log_dir is None:  # prefixed only when there is a log to write
            return True
        block, continued = self._line.resume(owner, block, continued)
        block = without_empty_redraws(block, continued)
        if not block:
            return self.kept("controller.log")
        self.end_line(owner)
        logged = self.write("controller.log", prefix_block(prefix, block, continued))
        self._line.wrote(owner, "controller.log", block)
        return logged

    def end_line(self, owner: object = None) -> None:
        """End controller.log's unfinished line (unless ``owner``'s): the next starts its own."""
        if self._line.cut(owner) is not None:
            self.write("controller.log", b"\n")

    def stop_if_lost(self) -> None:
        """Raise the stop a failed file brought since the last call, if any."""
        stop, self._stop = self._stop, None
        if stop is not None:
            raise stop

    def kept(self, name: str) -> bool:
        """Whether file ``name`` has everything written to it so far (as far as we know)."""
        return self.log_dir is not None and name not in self.log_dir.lost

    def flush(self) -> None:
        """Write every file out, stopping nothing (the job is ending): a file that fails is
        given up, and in :meth:`unsaid`."""
        for name, merge in self._merges.items():  # a host not flushed: its bytes still count
            for piece in merge.drain():
                self.write(name, piece)
        self._stop = None
        if self.log_dir is not None:
            with contextlib.suppress(OutputLost):
                self.log_dir.flush()

    def unsaid(self) -> list[str]:
        """As :meth:`LogDir.unsaid`."""
        return [] if self.log_dir is None else self.log_dir.unsaid()
