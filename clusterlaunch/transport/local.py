"""Local transport for ``localhost``: the same primitives as SSH, no sshd needed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import subprocess
import sys
import time

from clusterlaunch.core.commands import for_login_shell, home_relative
from clusterlaunch.core.defaults import CHILDREN_END_WAIT_S
from clusterlaunch.core.exits import shell_status
from clusterlaunch.core.model import LOCALHOST

_CHUNK = 1 << 20
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux's; Python 3.10+ names it


def login_shell() -> str:
    """The user's login shell, which runs commands as sshd would (``/bin/sh`` if unset)."""
    return pwd.getpwuid(os.getuid()).pw_shell or "/bin/sh"


def start_directory() -> str:
    """Where a ``localhost`` command starts: the home directory, as sshd starts a session.

    So a relative ``workdir`` means the same on ``localhost`` as on an SSH host
    (under the home directory, not the controller's current directory). A home
    that cannot be entered gives ``/``, as sshd does.
    """
    home = os.path.expanduser("~")
    return home if os.path.isdir(home) and os.access(home, os.X_OK) else "/"


def local_path(path: str) -> str:
    """A :class:`~clusterlaunch.core.commands.HostPath` (``workdir``) as ``localhost`` sees it.

    The one place for it: ``~`` and ``~/x`` are the home directory, anything else
    relative (``~root/x`` too, taken literally, as the host's shell takes it
    quoted) is below :func:`start_directory`, as over SSH and SFTP.
    """
    return os.path.join(start_directory(), home_relative(path))


def _make_room(fd: int, size: int) -> None:
    """Let stdin pipe ``fd`` hold ``size`` bytes, so that writing them does not wait for a reader.

    An SSH channel takes them at once (its 2 MiB window); a pipe holds 64 KiB, and
    behind a ``setup:`` that hangs nobody reads what follows the command: the
    agent's 100 KB held the start of a ``localhost`` host until the setup ended,
    with no slow-setup notice and nothing a Ctrl-C could stop it by. Best effort:
    Linux only, up to its pipe-max-size (1 MiB unless lowered).
    """
    if size > 1 << 16 and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, _F_SETPIPE_SZ, size)


class LocalProcess:
    """A command run by the user's login shell, as sshd would run it."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self._streams = [popen.stdout, popen.stderr]
        for stream in self._streams:
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
        self._eof = [False, False]

    def waitables(self) -> list[int]:
        """Open stdout/stderr pipes."""
        return [
            stream.fileno()
            for stream, done in zip(self._streams, self._eof, strict=True)
            if stream is not None and not done
        ]

    def read(self) -> tuple[bytes, bytes]:
        """Available stdout and stderr bytes."""
        return self._read(0), self._read(1)

    def _read(self, index: int) -> bytes:
        stream = self._streams[index]
        if self._eof[index] or stream is None:
            return b""
        try:
            data = os.read(stream.fileno(), _CHUNK)
        except BlockingIOError:
            return b""
        if not data:
            self._eof[index] = True
        return data

    def send(self, data: bytes) -> bool:
        """Write to stdin; False when the pipe is closed."""
        stdin = self._popen.stdin
        if stdin is None or stdin.closed:
            return False
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def close_stdin(self) -> None:
        """EOF on the process's stdin."""
        stdin = self._popen.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(OSError):
                stdin.close()

    def exit_status(self) -> int | None:
        """Exit status as the shell reports it (128+N for signal N)."""
        code = self._popen.poll()
        return None if code is None else shell_status(code)

    def finished(self) -> bool:
        """Exited with both pipes drained."""
        return all(self._eof) and self._popen.poll() is not None

    def exited_by(self, deadline: float) -> bool:
        """Whether the process exits before ``time.monotonic()`` reaches ``deadline`` (waits)."""
        try:
            self._popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return False
        return True

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process itself (not reaped yet, so its PID is still its own)."""
        self._popen.send_signal(signum)

    def close(self) -> None:
        """Close our ends of the pipes."""
        self.close_stdin()
        for stream in self._streams:
            if stream is not None:
                stream.close()
        self._eof = [True, True]


def end_processes(processes: list[LocalProcess], wait: float = CHILDREN_END_WAIT_S) -> None:
    """Close our ends of each of ``processes``' pipes (EOF on its stdin; its writes fail,
    as when the controller exits, so none waits for a reader that has gone) and wait for
    each, so that the controller exits with none left running: SIGTERM to those still
    there after ``wait`` seconds, then SIGKILL to any still there 2 s later. A Ctrl-C
    while waiting hurries this, and never skips it."""
    for process in processes:
        process.close()
    left = processes
    try:
        deadline = time.monotonic() + wait
        left = [process for process in left if not process.exited_by(deadline)]
    finally:
        for signum, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 1.0)):
            for process in left:
                process.signal(signum)
            deadline = time.monotonic() + grace
            left = [process for process in left if not process.exited_by(deadline)]


class LocalConnection:
    """``localhost``: processes are children of the controller, in their own session."""

    def __init__(self) -> None:
        self._processes: list[LocalProcess] = []

    host = LOCALHOST
    inherits_environment = "localhost inherits"
    """Its commands start with this shell's environment: the preflight names that source."""

    def start(self, command: str, stdin: bytes = b"") -> LocalProcess:
        """Run ``command`` with the login shell; ``stdin`` is written first."""
        line, sent = for_login_shell(command, stdin)
        popen = subprocess.Popen(
            [login_shell(), "-c", line],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Like an SSH session: a Ctrl-C at the terminal reaches the
            # controller only, which then tears down every host the same way.
            start_new_session=True,
            cwd=start_directory(),
        )
        process = LocalProcess(popen)
        self._processes.append(process)
        assert popen.stdin is not None
        _make_room(popen.stdin.fileno(), len(sent))
        process.send(sent)
        return process

    def alive(self) -> bool:
        """The local machine is always reachable."""
        return True

    def close(self) -> None:
        """Every command started here ended and waited for (:func:`end_processes`).

        A failed ``check``'s probe on ``localhost`` outlived the controller in 4 runs
        of 12 on a loaded machine, its master port still bound for a script's next command.
        """
        end_processes(self._processes)
