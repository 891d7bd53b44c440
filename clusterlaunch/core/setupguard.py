"""A host's ``setup:`` under the same teardown guarantees as the job.

The setup runs in the shell that then ``exec``s the probe, the agent or
jobctl (so ``export``, ``source`` and ``module load`` carry over), before any
program of ours runs on the host: nothing there would end it. Measured before
this module: ``setup: sleep 600`` hung the preflight with no output and, after
Ctrl-C, the shell and ``sleep`` kept running; a setup reading stdin ate the
program sent to Python. So:

* :func:`guarded` wraps the setup: stdin ``/dev/null``, stdout onto stderr, a
  watchdog that ends it after ``--setup-timeout`` seconds even if the
  controller is gone (and, at once, what it left when it ended the shell),
  its process group reported on stdout first, and :data:`SETUP_VAR` exported,
  by which the program after it ends what it left running;
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


SETUP_VAR = "CLUSTERLAUNCH_SETUP"
"""Exported by the wrapper before the setup runs, ``PID.START`` of its shell: what the
setup starts carries it, so the program the shell becomes finds what the setup left
running, even detached (``remote/teardown.py``: ``setup_marker``)."""

# The watchdog's clock, in 1/100 s: the uptime (the steps' own time drifted 1.6 ms a
# step), else the steps counted. `1${frac}-100` keeps a fraction like "08" out of octal.
_CLOCK = (
    "__cl_now() { if read -r __cl_u __cl_x 2>/dev/null </proc/uptime; "
    "then __cl_n=$((${__cl_u%.*}*100+1${__cl_u#*.}-100)); else __cl_n=$((__cl_n+__cl_q)); fi; }; "
)
# Whether the shell is still there: not a zombie (a parent that reaps it only once its
# pipes end, as Python's communicate() does, kept its PID alive for kill -0), else,
# without /proc, kill -0.
_SHELL_ALIVE = (
    "__cl_alive() { if { read -r __cl_l </proc/$$/stat; } 2>/dev/null; then "
    '__cl_l=${__cl_l##*") "}; [ "${__cl_l%% *}" != Z ]; else kill -0 $$ 2>/dev/null; fi; }; '
)
# Whether the setup's group holds a live process besides the watchdog (which is in it):
# field 5 of /proc/PID/stat, read by the shell itself (no process started, any shell).
_OTHERS_LEFT = (
    "__cl_left() { __cl_c=0; for __cl_f in /proc/[0-9]*/stat; do "
    '{ read -r __cl_l <"$__cl_f"; } 2>/dev/null || continue; __cl_l=${__cl_l##*") "}; '
    "__cl_z=${__cl_l%% *}; __cl_l=${__cl_l#* }; __cl_l=${__cl_l#* }; "
    '[ "${__cl_l%% *}" = $$ ] && [ "$__cl_z" != Z ] && __cl_c=$((__cl_c+1)); done; '
    "[ $__cl_c -gt 1 ]; }; "
)
# After the group's SIGTERM, with the channel let go (the controller hears the end at
# once): SIGKILL to what is left 2 s later, if anything is.
_KILL_LEFT = (
    "exec >/dev/null 2>&1; __cl_i=0; "
    "while [ $__cl_i -lt 20 ] && __cl_left; do sleep 0.1; __cl_i=$((__cl_i+1)); done; "
    "! __cl_left || kill -s KILL -- -$$"
)


def guarded(setup: str, guard: SetupGuard) -> str:
    """``setup`` as shell code that reports its PID and cannot hang or outlive us.

    Before the setup the shell prints ``@@setup@@ pid=PID start=T limit=S``:
    sshd made it a session leader, so PID is also the process group of
    everything the setup starts. A watchdog in that group ends it after
    ``limit`` seconds (SIGTERM, SIGKILL 2 s later), controller or not.
    It looks every 0.1 s (0.5 s after the first 5 s) whether the shell is still
    there: a setup that ended it (``exit``, a failure, or ``exec CMD``, which
    no trap sees) is answered at once, not after ``--setup-timeout`` (``exec
    true`` held the channel for all of it, and left the watchdog), and the
    watchdog ends what that setup left in its group, then itself.
    A setup that succeeds ends the watchdog; a trap only notes the SIGTERM,
    and the loop kills its ``sleep`` if the wait did not reap it (see the
    comment below). Killing the watchdog alone left its ``sleep`` running for
    up to its step, found as a leftover by a sandbox ``down`` right after a run.
    ``kill -s SIG -- -PGID`` is the form dash accepts. What the setup leaves
    running after it succeeds carries :data:`SETUP_VAR`, for the program the
    shell becomes to end with itself.
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
        "trap '' PIPE; __cl_t=0; trap '__cl_t=1' TERM; __cl_i=0; __cl_n=0; __cl_q=0; "
        f"{_CLOCK}{_SHELL_ALIVE}{_OTHERS_LEFT}__cl_now; __cl_e=$((__cl_n+{limit * 100})); "
        "while [ $__cl_t = 0 ] && __cl_alive && [ $__cl_n -lt $__cl_e ]; do "
        "if [ $__cl_i -lt 50 ]; then __cl_d=0.1 __cl_q=10; else __cl_d=0.5 __cl_q=50; fi; "
        "sleep $__cl_d </dev/null >/dev/null 2>&1 & __cl_p=$!; __cl_r=129; "
        "[ $__cl_t = 1 ] || { wait $__cl_p; __cl_r=$?; }; "
        "[ $__cl_t = 0 ] || [ $__cl_r -le 128 ] || kill -s KILL $__cl_p 2>/dev/null; "
        "__cl_i=$((__cl_i+1)); __cl_now; done; [ $__cl_t = 0 ] || exit 0; trap '' TERM; "
        "if __cl_alive; then "
        f"kill -s TERM -- -$$ 2>/dev/null || kill -s TERM $$; printf '{mark} timeout\\n'; "
        f"printf 'clusterlaunch: setup did not finish within {limit} s "
        "(--setup-timeout); stopped it\\n' >&2; else kill -s TERM -- -$$ 2>/dev/null; fi; "
        + _KILL_LEFT
    )
    return (
        f"{{ ( {watchdog} ) </dev/null & __cl_w=$!; __cl_st=$({_start_time('$$')}); "
        f'export {SETUP_VAR}="$$.$__cl_st"; '
        f'printf \'{mark} pid=%s start=%s limit={limit}\\n\' "$$" "$__cl_st"; '
        "{ " + setup.strip() + "\n} </dev/null >&2; __cl_s=$?; "
        "[ $__cl_s -eq 0 ] || exit $__cl_s; kill $__cl_w 2>/dev/null; } && "
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


def _never_suspended(since: float) -> float:
    """No suspension seen (a caller without a suspension watch)."""
    return 0.0


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

    def notices(self, suspended_since: Callable[[float], float] = _never_suspended) -> list[str]:
        """``host: setup still running after N s`` after 5 s, then every 30 s, counting only
        the time this controller was awake: ``suspended_since(t)`` is how long it was stopped
        since ``t`` (Ctrl-Z). A setup that ended while we were stopped was still "running
        after 35 s" at the first read after a 30 s stop, its "done" not read yet."""
        if not self.running or self.timed_out or self.started_at is None:
            return []
        seconds = self.elapsed() - suspended_since(self.started_at)
        if seconds < self._next_notice:
            return []
        seconds = int(seconds)
        self._next_notice = seconds + SLOW_EVERY_S
        return [
            f"{self.host}: setup still running after {seconds} s (--setup-timeout {self.limit})"
        ]

    def overdue(self) -> bool:
        """Running well past its limit: the host's watchdog did not end it. Our suspensions
        count here: the watchdog's clock ran on while we were stopped."""
        return self.running and self.limit > 0 and self.elapsed() > self.limit + OVERDUE_S


def _partial_mark(buffer: bytearray) -> int:
    """Length of the longest end of ``buffer`` that begins a report."""
    for size in range(min(len(MARK) - 1, len(buffer)), 0, -1):
        if buffer.endswith(MARK[:size]):
            return size
    return 0
