"""A host's ``setup:`` under the same teardown guarantees as the job.

The setup runs in the shell that then ``exec``s the probe, the agent or
jobctl (so ``export``, ``source`` and ``module load`` carry over), before any
program of ours runs on the host: nothing there would end it. Measured before
this module: ``setup: sleep 600`` hung the preflight with no output and, after
Ctrl-C, the shell and ``sleep`` kept running; a setup reading stdin ate the
program sent to Python. So:

* :func:`guarded` wraps the setup: stdin ``/dev/null``, stdout onto stderr, a
  watchdog that ends it after ``--setup-timeout`` seconds even if the
  controller is gone, and its process group reported on stdout first;
* :class:`SetupWatch` reads those reports out of a host's stdout and says when
  a setup is slow;
* :func:`clusterlaunch.controller.setups.kill_setups` ends, through a fresh channel, every setup the
  controller gives up on (Ctrl-C, SIGTERM, a failed host), by process group
  and only after checking the PID still runs our command, never by name.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

MARK = b"@@setup@@ "
SLOW_AFTER_S = 5.0  # a conda activate takes 1-3 s; past this the user hears why nothing moves
SLOW_EVERY_S = 30.0
OVERDUE_S = 5.0  # the controller's own bound, past the host's watchdog, should that fail
_START = re.compile(r"[0-9]{1,20}")


def _start_time(pid: str) -> str:
    """Shell code printing process ``pid``'s start time, in clock ticks since boot.

    Field 22 of ``/proc/PID/stat``, counted after the ``) `` that ends the
    command name (which may hold spaces): no recycled PID has ours. It replaced
    a token looked for in ``/proc/PID/cmdline``: sent through
    :func:`clusterlaunch.core.commands.for_login_shell`, the shell's command
    line holds only that function's wrapper.
    """
    return "awk '{sub(/.*\\) /, \"\"); print $20}' /proc/" + pid + "/stat 2>/dev/null"


@dataclass(frozen=True)
class SetupGuard:
    """How long a setup may run."""

    timeout: float


def guarded(setup: str, guard: SetupGuard) -> str:
    """``setup`` as shell code that reports its PID and cannot hang or outlive us.

    Before the setup the shell prints ``@@setup@@ pid=PID start=T limit=S``:
    sshd made it a session leader, so PID is also the process group of
    everything the setup starts. A watchdog in that group ends it after
    ``limit`` seconds (SIGTERM, SIGKILL 2 s later), controller or not. Ended
    early (the setup finished, or ``kill_command``), it ends its own ``sleep``
    too: a trap only notes the SIGTERM, and the loop kills its ``sleep`` if
    the wait did not reap it (see the comment below).
    Killing the watchdog alone left its ``sleep`` running for up to its step
    (1 s), found as a leftover by a sandbox ``down`` right after a run.
    ``kill -s SIG -- -PGID`` is the form dash accepts.
    An EXIT trap ends the watchdog if the setup calls ``exit``; it is set after
    the watchdog starts: forked with the trap already set, bash 5.2 printed
    ``wait_for: No record of process N`` on stderr in 27 of 30 runs over ssh
    (0 of 30 this way).
    The setup is a group closed on its own line: a trailing comment cannot
    swallow the rest, and its "||" cannot bypass a failed ``cd``. Its stdout
    goes to stderr: the shell's stdout carries only the protocol.
    """
    limit = max(1, math.ceil(guard.timeout))
    mark = MARK.decode().strip()
    # A SIGTERM at any point: before the trap, the subshell dies with nothing started;
    # after it, the flag skips the wait or cuts it short (status > 128), and only then
    # is the sleep killed, unreaped (or, hit by the same group SIGTERM, reaped
    # microseconds before); a wait that ran to its end reaped it, and its PID is not
    # signalled. Noting the signal instead of killing in the trap closes the
    # race with a setup that ends at once (`true`): "$__cl_p" is unset between the
    # fork and the assignment. SIGKILL, not SIGTERM: a child signalled between its
    # fork and its exec still runs dash's handler, which noted the signal and lost it
    # (a `sleep 1` outlived the watchdog in 1 of 100 runs of `setup: true`).
    watchdog = (
        "trap '' PIPE; __cl_t=0; trap '__cl_t=1' TERM; __cl_i=0; "
        f"while [ $__cl_t = 0 ] && [ $__cl_i -lt {limit} ]; do "
        "sleep 1 </dev/null >/dev/null 2>&1 & __cl_p=$!; __cl_r=129; "
        "[ $__cl_t = 1 ] || { wait $__cl_p; __cl_r=$?; }; "
        "[ $__cl_t = 0 ] || [ $__cl_r -le 128 ] || kill -s KILL $__cl_p 2>/dev/null; "
        "__cl_i=$((__cl_i+1)); done; [ $__cl_t = 0 ] || exit 0; trap '' TERM; "
        f"kill -s TERM -- -$$ 2>/dev/null || kill -s TERM $$; printf '{mark} timeout\\n'; "
        f"printf 'clusterlaunch: setup did not finish within {limit} s "
        "(--setup-timeout); stopped it\\n' >&2; "
        "exec >/dev/null 2>&1; sleep 2; kill -s KILL -- -$$"
    )
    return (
        f"{{ ( {watchdog} ) </dev/null & __cl_w=$!; "
        "trap 'kill $__cl_w 2>/dev/null' EXIT; "
        f'printf \'{mark} pid=%s start=%s limit={limit}\\n\' "$$" "$({_start_time("$$")})"; '
        "{ " + setup.strip() + "\n} </dev/null >&2; __cl_s=$?; kill $__cl_w 2>/dev/null; "
        "trap - EXIT; [ $__cl_s -eq 0 ] || exit $__cl_s; } && "
        f"printf '{mark} done\\n'"
    )


def kill_command(pid: int, start: str) -> str:
    """End process group ``pid`` if its leader is still our shell (started at ``start``).

    SIGTERM to the group now; SIGKILL to whatever is left 2 s later, from a
    detached ``sleep 2`` so that the answer comes at once (waiting for the
    group to vanish would also wait for init to reap its zombies: 2 s here).
    """
    group = f"-- -{int(pid)}"
    return (
        f'[ "$({_start_time(str(int(pid)))})" = {_check_start(start)} ] || exit 0; '
        f"kill -s TERM {group} 2>/dev/null || kill -s TERM {int(pid)}; "
        f"( sleep 2; kill -s KILL {group} ) </dev/null >/dev/null 2>&1 & exit 0"
    )


def _check_start(start: str) -> str:
    # Inserted into shell code as it is: it must need no quoting.
    if not _START.fullmatch(start):
        raise ValueError(f"setup start time {start!r}: digits only")
    return start


class SetupWatch:
    """One host's setup as its shell reported it on stdout.

    :meth:`feed` takes the reports out of the stream and passes everything
    else through untouched (a chatty ``.bashrc``, then the program's own
    output once the setup is done). A host without setup prints no reports.
    """

    def __init__(
        self, host: str, expected: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.host = host
        self.clock = clock
        self.pid: int | None = None
        self.start = ""  # the shell's start time (_start_time), checked before a kill
        self.limit = 0
        self.started_at: float | None = None
        self.done = not expected
        self.timed_out = False
        self.killed = False  # a kill was sent: a teardown asking every round sends one
        self._next_notice = SLOW_AFTER_S
        self._buffer = bytearray()

    @property
    def running(self) -> bool:
        """Reported started and not (yet) finished."""
        return self.pid is not None and not self.done

    def feed(self, data: bytes) -> bytes:
        """``data`` without the setup reports (held back only while a report is incomplete)."""
        if self.done and not self._buffer:
            return data
        buffer = self._buffer
        buffer += data
        passed = bytearray()
        while not self.done:
            start = buffer.find(MARK)
            if start < 0:
                keep = _partial_mark(buffer)
                passed += buffer[: len(buffer) - keep]
                del buffer[: len(buffer) - keep]
                return bytes(passed)
            end = buffer.find(b"\n", start)
            passed += buffer[:start]
            del buffer[:start]
            if end < 0:
                return bytes(passed)
            self._report(bytes(buffer[len(MARK) : end - start]))
            del buffer[: end - start + 1]
        passed += buffer
        buffer.clear()
        return bytes(passed)

    def _report(self, text: bytes) -> None:
        words = text.decode("ascii", "replace").split()
        fields = dict(word.partition("=")[::2] for word in words)
        if words[:1] == ["done"]:
            self.done = True
        elif words[:1] == ["timeout"]:
            self.timed_out = True
        elif fields.get("pid", "").isdigit() and _START.fullmatch(fields.get("start", "")):
            self.pid = int(fields["pid"])
            self.start = fields["start"]
            self.limit = int(fields["limit"]) if fields.get("limit", "").isdigit() else 0
            self.started_at = self.clock()

    def elapsed(self) -> float:
        """Seconds since the setup started (0 before it did)."""
        return 0.0 if self.started_at is None else self.clock() - self.started_at

    def notices(self) -> list[str]:
        """``host: setup still running after N s`` after 5 s, then every 30 s."""
        if not self.running or self.timed_out or self.elapsed() < self._next_notice:
            return []
        seconds = int(self.elapsed())
        self._next_notice = seconds + SLOW_EVERY_S
        return [
            f"{self.host}: setup still running after {seconds} s (--setup-timeout {self.limit})"
        ]

    def overdue(self) -> bool:
        """Running well past its limit: the host's watchdog did not end it."""
        return self.running and self.limit > 0 and self.elapsed() > self.limit + OVERDUE_S


def _partial_mark(buffer: bytearray) -> int:
    """Length of the longest end of ``buffer`` that begins a report."""
    for size in range(min(len(MARK) - 1, len(buffer)), 0, -1):
        if buffer.endswith(MARK[:size]):
            return size
    return 0
