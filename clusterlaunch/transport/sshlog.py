"""Where an ssh master writes its messages: a file without a name, read back by the controller.

A master's stderr says why it failed (classified by :mod:`sshfailure`) or why
a running one ended (``OpenSshConnection.lost_because``). It used to be a named
file in the control directory, one per host: creating it cost 0.19-0.47 ms of
the controller's CPU each on this machine's ext4 (the inode allocation;
measured in 256-file loops), a quarter of the OpenSSH client's marginal cost
per host. A memory file (``memfd_create``, Linux) costs 0.003 ms and needs no
name, no directory entry and no cleanup; elsewhere an unlinked temporary file
does the same job.
"""

from __future__ import annotations

import os
import tempfile

_NAME = "clusterlaunch-ssh-master"
_CHUNK = 1 << 16


class MasterLog:
    """One master's stderr, open in this process until :meth:`close`.

    The master writes through its own copy of the descriptor; this side only
    reads with ``pread``, which leaves the shared file offset alone.
    """

    def __init__(self) -> None:
        self._fd: int | None = _unnamed_file()

    def fileno(self) -> int:
        """The descriptor to give the master as its stderr."""
        if self._fd is None:
            raise ValueError("master log already closed")
        return self._fd

    def said(self) -> str:
        """Everything the master wrote so far (empty once closed)."""
        if self._fd is None:
            return ""
        parts, offset = [], 0
        while chunk := os.pread(self._fd, _CHUNK, offset):
            parts.append(chunk)
            offset += len(chunk)
        return b"".join(parts).decode("utf-8", "replace")

    def close(self) -> None:
        """Drop this process's descriptor (the master keeps its own while it runs)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _unnamed_file() -> int:
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is not None:
        try:
            fd: int = memfd_create(_NAME, os.MFD_CLOEXEC)
            return fd
        except OSError:  # a kernel without it (ENOSYS): the portable way below
            pass
    fd, path = tempfile.mkstemp(prefix=f"{_NAME}-")
    os.unlink(path)
    return fd
