"""Local programs that end with the controller, however it ends (``--sync``'s rsync).

A program the controller starts in a session of its own (so that a Ctrl-C
reaches the controller only) outlives a SIGKILLed controller: rsync and its ssh
were reparented to PID 1 and the hosts' ``rsync --server`` copied on to the end.
So such a program runs below a small watcher (this Python, ``-I -S``, stdlib
only) that leads the session and holds the read end of a pipe whose write end
only the controller holds. The kernel closes that end when the controller dies,
SIGKILL included; the watcher reads end of file and SIGKILLs its process group:
the program and what it started there (rsync's ssh). Otherwise it waits for the
program and exits as it did (128 + N for signal N).

Why not the alternatives: ``prctl(PR_SET_PDEATHSIG)`` is Linux only, needs code
in the child before ``exec`` (``preexec_fn`` is unsafe in a threaded process, and
the copies run in threads), fires when the spawning *thread* ends, and reaches
rsync but not its ssh; rsync's ``--timeout`` ends a copy that stalls, not one
that flows. A pipe's end of file works the same on Linux and macOS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

WATCHER = r"""
import os, select, signal, sys
lifeline = int(sys.argv[1])
wake_r, wake_w = os.pipe()  # the program's end wakes the select below (SIGCHLD)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda signum, frame: None)
child = os.fork()
if child == 0:
    try:
        os.close(lifeline)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; exec keeps that
            signal.signal(signum, signal.SIG_DFL)
        os.execvp(sys.argv[2], sys.argv[2:])
    except OSError as exc:
        os.write(2, ("cannot run %s: %s\n" % (sys.argv[2], exc.strerror)).encode())
    os._exit(127)
while True:
    pid, status = os.waitpid(child, os.WNOHANG)
    if pid:
        os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    ready = select.select([lifeline, wake_r], [], [])[0]
    if lifeline in ready:  # end of file: the controller is gone
        os.killpg(0, signal.SIGKILL)
    if wake_r in ready:
        os.read(wake_r, 512)
"""


class Lifeline:
    """A pipe that ties the programs started through it to this process.

    ``cut`` (or leaving the ``with``) closes our end: what still runs is killed.
    """

    def __init__(self) -> None:
        self._read, self._write = os.pipe()

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def popen(self, argv: list[str], **options: Any) -> subprocess.Popen[bytes]:
        """``argv`` below a watcher in a session of its own; ``options`` as Popen's."""
        if not sys.executable:  # an embedded Python: no watcher to run
            return subprocess.Popen(argv, start_new_session=True, **options)
        watched = [sys.executable, "-I", "-S", "-c", WATCHER, str(self._read), *argv]
        try:
            return subprocess.Popen(
                watched, pass_fds=(self._read,), start_new_session=True, **options
            )
        finally:
            os.close(self._read)  # the watcher's now; ours would keep it open
            self._read = -1

    def cut(self) -> None:
        """Close our end: the watcher kills whatever of the program still runs."""
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        if self._write >= 0:
            os.close(self._write)
            self._write = -1


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s session (it leads it: the watcher, the program, its ssh)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
