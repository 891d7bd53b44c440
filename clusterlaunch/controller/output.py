"""Where job output goes: the console (prefixed, filtered, coloured) and ``--log-dir``.

The supervisor hands over raw chunks tagged by rank or host; this module splits them into
lines (per stream, so ranks never merge), prefixes them and writes them: worker stdout to
stdout, stderr to stderr. The console is ``console.py``, the log files ``logdir.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from clusterlaunch.controller.console import Console, GuardedStream, HeldStop, message_bytes
from clusterlaunch.controller.logdir import LogDir, rank_log, stamp
from clusterlaunch.controller.logwrites import LogWrites
from clusterlaunch.controller.status import StatusLine
from clusterlaunch.core import interrupts, render
from clusterlaunch.core.errors import JobOutcome, OutputLost
from clusterlaunch.core.lines import (
    LineBuffer,
    Prefixes,
    TailKeeper,
    prefixed_pieces,
    without_empty_redraws,
)
from clusterlaunch.core.progress import BannerFold
from clusterlaunch.transport.srun import without_exit_notes


class OutputRouter:
    """Turns tagged chunks into lines on the console and in the log directory."""

    def __init__(
        self,
        prefixes: Prefixes,
        console: Console,
        rank_filter: frozenset[int] | None = None,
        log_dir: LogDir | None = None,
        plain_prefixes: Prefixes | None = None,
        status: StatusLine | None = None,
        fold_banner: bool = True,
        host_logs: Mapping[str, str] | None = None,
        restart_count: int | None = None,
    ) -> None:
        self._prefixes = prefixes
        self._plain = plain_prefixes or prefixes  # for files: no colour codes
        self._console = console
        self._filter = rank_filter
        self._logs = LogWrites(log_dir)
        self._console_stop = HeldStop()  # raised by stop_if_lost, as a log file's
        self.hold = interrupts.installed_hold()  # a signal waits while bytes go to the files
        self._restart_count = restart_count  # a later attempt's ranks: their own files
        self._host_logs = dict(host_logs or {})  # exec: node-N.log, each host's bytes as sent
        self._buffers: dict[tuple[object, bool], LineBuffer] = {}
        self.tails = TailKeeper()
        self._quiet_hosts = False
        self.hidden_lines = 0
        self._status = status
        self._header: str | None = None
        self._fold = BannerFold(len(prefixes.hosts)) if fold_banner else None  # torchrun's banner
        self.on_rank_output: Callable[[], None] | None = None

    @property
    def has_log_dir(self) -> bool:  # output is also written to --log-dir
        return self._logs.log_dir is not None

    def quiet_hosts(self) -> None:
        """From now on, torchrun's own output goes to the log only. Called when teardown starts:
        every torchrun then prints the same SignalException traceback, which would bury the
        failure summary. Worker output is never hidden."""
        self._quiet_hosts = True

    def announce(self, header: str) -> None:
        """The job header: at once (a console gone stops: nothing starts), or after the status."""
        if self._status is not None and self._status.active:
            self._header = header
        else:
            self.message(header)
            self.stop_if_lost()

    def started(self, host: str) -> None:
        """``host``'s agent started the job; once all have, the header replaces the status."""
        if self._status is not None:
            with self.hold.let_through():  # its redraw is a console write
                self._status.mark("started", host)
            if self._status.progress.complete("started"):
                self._begin()

    def _begin(self) -> None:
        """Before anything reaches the console: the status line goes, the header comes."""
        if self._status is not None:
            with self.hold.let_through():
                self._status.end()
        header, self._header = self._header, None
        if header is not None:
            self.message(header)

    def rank_output(self, rank: int, is_stderr: bool, data: bytes) -> None:
        """A worker's raw output chunk."""
        if self.on_rank_output is not None:  # run --stall-timeout's watch
            self.on_rank_output()
        buffer = self._buffer(rank, is_stderr)
        block = buffer.feed(data)
        self._emit_rank(rank, is_stderr, block, buffer.continued)

    def host_output(self, host: str, is_stderr: bool, data: bytes) -> None:
        """Output of the host's shell, torchrun itself, or a command run by ``exec``."""
        buffer = self._buffer(host, is_stderr)
        block = buffer.feed(data)
        self._emit_host(host, is_stderr, block, buffer.continued)

    def transport_output(self, host: str, data: bytes) -> None:
        """What ssh or srun wrote themselves (the host's shell, the agent's own errors):
        lines of their own, never glued to the command's unfinished last line, and kept
        out of exec's node-N.log, which holds the command's bytes alone. srun's note of
        the task's exit status is left out: the outcome says it."""
        buffer = self._buffer(("transport", host), True)
        block = without_exit_notes(buffer.feed(data))
        self._emit_host(host, True, block, buffer.continued, transport=True)

    def shell_output(self, host: str, data: bytes, ended: bool = False) -> None:
        """What the host's shell printed on stdout before clusterlaunch's program started
        (a ``BASH_ENV`` or login file, the setup): as :meth:`transport_output`, on stdout.
        ``ended``: that was all of it; a last line without a newline is ended now, not
        when the host ends (after the command's lines)."""
        if ended and not data.endswith(b"\n"):
            data += b"\n"  # as the console would end it: the command's lines come next
        buffer = self._buffer(("transport", host), False)
        self._emit_host(host, False, buffer.feed(data), buffer.continued, transport=True)

    def stop_if_lost(self) -> None:
        """Stop the job (OutputLost) if a log file or the console failed since the last call;
        asked once a host's bytes are all routed, so the other places have all they brought."""
        self._logs.stop_if_lost()
        self._console_stop.raise_held()

    def message(self, text: str) -> None:
        """clusterlaunch's own message, always to stderr."""
        line = message_bytes(f"clusterlaunch: {text}") + b"\n"
        self._begin()
        self._say(line, f"{stamp()} ".encode() + line)

    def raw_stderr(self, data: bytes) -> None:
        """clusterlaunch's own lines, already prefixed (stack dumps): stderr and controller.log."""
        self._say(data, data)

    def _say(self, data: bytes, logged: bytes) -> None:
        self._logs.end_line()
        self._logs.write("controller.log", logged)
        self._write(self._console.err, [data])  # a rank's bar keeps its line, above ours

    def _write(
        self, stream: GuardedStream, pieces: Iterable[bytes | memoryview], owner: object = None
    ) -> None:
        """``pieces`` on the console (on a line of their own, unless ``owner``'s), once the files
        have them: a write may block (Ctrl-S), so a signal's stop is let through to it."""
        try:
            with self.hold.let_through():
                self._console.end_line(stream, owner)
                stream.write_pieces(pieces)
                stream.flush()
        except OutputLost as lost:  # the rest of the read still reaches the files first
            self._console_stop.hold(lost)

    def report_hidden(self) -> None:
        """Say how many lines of torchrun's shutdown output the teardown kept off the console:
        those controller.log took (unbuffered: taken is written; given up, it hides no more)."""
        if not self.hidden_lines:
            return
        where = "in controller.log" if self.has_log_dir else "use --log-dir to keep them"
        self.message(f"hid {self.hidden_lines} line(s) of torchrun shutdown output ({where})")

    def finish(self, outcome: JobOutcome) -> None:
        """The job's last lines: each log file given up that ``outcome`` does not name, then
        ``outcome`` when it failed or was stopped. Only a console that failed stops (OutputLost)."""
        self._logs.flush()  # a file that fails now is said here too, before the summary
        for problem in self._logs.unsaid():
            if problem not in outcome.reason:
                self.message(f"the logs are incomplete: {problem}")
        if outcome.exit_code != 0:
            self.message(render.outcome_text(outcome))  # console and controller.log
        self._console_stop.raise_held()  # since the teardown's last round, as ever

    def flush_host(self, host: str, ranks: Iterable[int]) -> None:
        """A host ended: its unfinished last lines are passed on as they are. ``rank-N.log``
        gets the bytes exactly (no newline is added); the console and ``controller.log`` get a
        newline after a last line that had none, so what comes next starts a line of its own."""
        for rank in ranks:
            for is_stderr in (False, True):
                buffer = self._buffer(rank, is_stderr)
                block = buffer.flush()
                self._emit_rank(rank, is_stderr, block, buffer.continued)
                if buffer.line_open:
                    self._emit_rank(rank, is_stderr, b"\n", True, to_log=False)
                self._logs.end_stream(rank_log(rank, self._restart_count), is_stderr)
        shell = ("transport", host)  # the shell's stdout first: it came before the command's
        for key, is_stderr, transport in ((shell, False, True), (host, False, False),
                                          (host, True, False), (shell, True, True)):  # fmt: skip
            buffer = self._buffer(key, is_stderr)
            block = buffer.flush()
            self._emit_host(host, is_stderr, block, buffer.continued, transport=transport)
            if buffer.line_open:
                self._emit_host(host, is_stderr, b"\n", True, False, transport)
            if not transport and host in self._host_logs:  # exec's node-N.log
                self._logs.end_stream(self._host_logs[host], is_stderr)

    def close(self) -> None:
        """Flush the console and the log files. The files stay open: they are their
        opener's (one launch, or every attempt of a restarting job), which closes them."""
        self._begin()
        self._say_banner(final=True)
        self._console.end_line()  # a lost host's bar: the shell's prompt starts a line
        self._logs.end_line()
        self._console.out.flush()
        self._console.err.flush()
        self._logs.flush()  # the job has ended: a file that fails is said, stops nothing
        for problem in self._logs.unsaid():
            self._console.say(f"clusterlaunch: the logs are incomplete: {problem}")

    def _buffer(self, key: object, is_stderr: bool) -> LineBuffer:
        if (key, is_stderr) not in self._buffers:
            self._buffers[(key, is_stderr)] = LineBuffer(live_cr=True)
        return self._buffers[(key, is_stderr)]

    def _emit_rank(
        self, rank: int, is_stderr: bool, block: bytes, continued: bool, to_log: bool = True
    ) -> None:
        if not block:
            return
        self.tails.add(rank, block, is_stderr)
        if to_log:  # first, and then the console in any case
            self._logs.write_stream(rank_log(rank, self._restart_count), is_stderr, block)
        if self._filter is None or rank in self._filter:
            self._begin()
            self._say_banner(final=True)  # the ranks began: as many hosts as said it so far
            prefix = self._prefixes.rank(rank)
            self._show((rank, is_stderr), is_stderr, prefix, block, continued)

    def _emit_host(
        self,
        host: str,
        is_stderr: bool,
        block: bytes,
        continued: bool,
        to_file: bool = True,
        transport: bool = False,
    ) -> None:
        if not block:
            return
        owner = ("transport" if transport else "host", host, is_stderr)
        if transport and not continued:
            self.tails.end_line(("host", host))
        self.tails.add(("host", host), block, owner)
        kept = self._logs.host_block(self._plain.host(host), owner, block, continued)
        if to_file and not transport and host in self._host_logs:
            self._logs.write_stream(self._host_logs[host], is_stderr, block)
        if self._quiet_hosts and kept:  # never hidden when lost with controller.log
            self.hidden_lines += block.count(b"\n")
            return
        if self._fold is not None:  # the console's copy only; the log has it all
            block = self._fold.feed(host, block)
            self._say_banner()
            if not block:
                return
        self._begin()
        self._show(owner, is_stderr, self._prefixes.host(host), block, continued)

    def _show(
        self, owner: object, is_stderr: bool, prefix: bytes, block: bytes, continued: bool
    ) -> None:
        """``owner``'s block on the console, on a line of its own: each stream is split
        into lines alone, so another's bar (``\\r``) may still hold the console's line."""
        stream: GuardedStream = self._console.err if is_stderr else self._console.out
        line = self._console.open_line(stream)
        block, continued = line.resume(owner, block, continued)
        block = without_empty_redraws(block, continued)
        if not block:  # the \n of a bar's line that another's output already ended, a lone \r
            return
        self._write(stream, prefixed_pieces(prefix, block, continued), owner)
        line.wrote(owner, stream, block)

    def _say_banner(self, final: bool = False) -> None:
        note = None if self._fold is None else self._fold.note(final)
        if note is not None:
            self.message(note)
