"""The OpenSSH client's private directory for its masters' control sockets.

Under the temporary directory (``TMPDIR``, else /tmp, ...), unless that path is
too long for a socket's: then /tmp. A directory that cannot be made is one line
naming where and why (and a ``TMPDIR`` passed over), exit 2 before anything is
contacted: it was ``error: /tmp/clusterlaunch-ssh-...: Read-only file system``,
which never said that ``TMPDIR`` had been skipped, and Python's "No usable
temporary directory found".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading

from clusterlaunch.core.errors import UsageError

_PREFIX = "clusterlaunch-ssh-"
_BASE_MAX = 50
"""sun_path holds 107 characters; ssh first binds ``ControlPath`` plus a 17-character
suffix, and our directory and socket names take about 40 more."""
_FIX = "set TMPDIR to a short directory this user may write in"


class ControlDir:
    """The job's private (0700) directory for the masters' control sockets.

    Removed when the last connection using it is closed.
    """

    def __init__(self, base: str | None = None) -> None:
        skipped = None
        if base is None:
            base = _temporary_directory()
            if len(base) > _BASE_MAX:
                base, skipped = "/tmp", base  # a long TMPDIR would not fit a socket path
        _sweep(base)
        prefix = f"{_PREFIX}{os.getpid()}-"
        try:
            self.path = tempfile.mkdtemp(prefix=prefix, dir=base)  # mode 0700
        except OSError as exc:
            raise UsageError(_cannot_make(base, exc, skipped)) from None
        self._users = 0
        self._lock = threading.Lock()

    def file(self, name: str) -> str:
        """A path in the directory (``name`` short: socket paths are limited)."""
        return os.path.join(self.path, name)

    def hold(self) -> None:
        """One more connection uses the directory."""
        with self._lock:
            self._users += 1

    def release(self) -> None:
        """A connection is done with it; the last one removes it."""
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            shutil.rmtree(self.path, ignore_errors=True)


def _temporary_directory() -> str:
    """Python's temporary directory; UsageError where it found none it could write a
    file in (every one read-only or full, or ``ulimit -f 0``)."""
    try:
        return tempfile.gettempdir()
    except OSError as exc:  # FileNotFoundError: "No usable temporary directory found in [...]"
        raise UsageError(
            f"--ssh-client openssh: no directory for ssh's control sockets: {exc.strerror} "
            "(none took a small file: read-only, full, or ulimit -f is 0); free one, raise "
            f"ulimit -f, or {_FIX}"
        ) from None


def _cannot_make(base: str, exc: OSError, skipped: str | None) -> str:
    said = f"--ssh-client openssh: cannot make ssh's control socket directory in {base} "
    said += f"({exc.strerror or exc})"
    if skipped is not None:
        said += f"; TMPDIR {skipped} was passed over: a socket path there would be too long"
    return f"{said}; {_FIX}"


def _sweep(base: str) -> None:
    """Remove our directories left by controllers that were killed (SIGKILL skips cleanup).

    Their masters are gone (killed with them); only stale sockets remain.
    """
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            pid = entry.name[len(_PREFIX) :].split("-")[0]
            if not entry.name.startswith(_PREFIX) or not pid.isdigit():
                continue
            if entry.stat(follow_symlinks=False).st_uid == os.getuid() and not _running(int(pid)):
                shutil.rmtree(entry.path, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
