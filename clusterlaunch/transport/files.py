"""File copies for ``--sync`` without rsync: over SFTP, or on this machine for ``localhost``.

Both sinks offer the same few operations, so the changed-only logic
(:func:`clusterlaunch.core.syncplan.plan_copy`) is shared. Every file and link is
written under a temporary name and renamed into place, so a host never sees a
half-written file, and a running program's file is replaced, not rewritten.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import secrets
import shutil
import stat
import threading
from typing import Protocol

import paramiko

from clusterlaunch.core.commands import home_relative
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.syncplan import RemoteEntry
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.local import LocalConnection, local_path
from clusterlaunch.transport.openssh import OpenSshConnection
from clusterlaunch.transport.ssh import CONNECTION_ERRORS, SshConnection, close_quietly


class FileSink(Protocol):
    """A directory tree on one host that files can be listed in and written to."""

    host: str

    def root(self, workdir: str) -> str:
        """``workdir`` as this sink's own calls want it (``~`` resolved)."""
        ...

    def listdir(self, path: str) -> dict[str, RemoteEntry] | None:
        """The entries of directory ``path`` (not following links), or None if absent."""
        ...

    def readlink(self, path: str) -> str:
        """The target of symlink ``path``."""
        ...

    def mkdir(self, path: str) -> None:
        """Create directory ``path`` (its parent exists)."""
        ...

    def put(self, local: str, path: str, mode: int, mtime_ns: int) -> None:
        """Copy local file ``local`` to ``path`` with that mode and modification time."""
        ...

    def symlink(self, target: str, path: str) -> None:
        """Make ``path`` a symlink to ``target``, replacing what was there."""
        ...

    def chmod(self, path: str, mode: int) -> None:
        """Set the permission bits of ``path``."""
        ...

    def cancel(self) -> None:
        """From another thread: make a ``put`` in progress stop soon (and clean up)."""
        ...

    def close(self) -> None:
        """Release the sink."""
        ...


def open_files(connection: Connection) -> FileSink:
    """A sink on ``connection``'s host (SFTP on SSH, the file system for ``localhost``)."""
    if isinstance(connection, LocalConnection):
        return LocalFiles()
    if isinstance(connection, SshConnection | OpenSshConnection):
        return SftpFiles(connection.host, connection.open_sftp())
    raise TransportError(connection.host, "this transport cannot copy files")


def _entry(mode: int, size: int, mtime: float) -> RemoteEntry:
    kind = (
        "dir"
        if stat.S_ISDIR(mode)
        else "file"
        if stat.S_ISREG(mode)
        else "link"
        if stat.S_ISLNK(mode)
        else "other"
    )
    return RemoteEntry(kind, size, int(mtime), stat.S_IMODE(mode))


def _temporary(path: str) -> str:
    # Unique per write, so two runs of clusterlaunch never share one.
    return posixpath.join(posixpath.dirname(path), f".clusterlaunch-tmp-{secrets.token_hex(6)}")


class _Cancelled(Exception):
    """Raised inside paramiko's progress callback to abandon an upload."""


class SftpFiles:
    """A host's file system over the SSH connection's SFTP subsystem."""

    def __init__(self, host: str, sftp: paramiko.SFTPClient) -> None:
        self.host = host
        self._sftp = sftp
        self._cancelled = threading.Event()

    def _fail(self, what: str, path: str, exc: BaseException) -> TransportError:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return TransportError(self.host, f"sftp: cannot {what} {path}: {why or type(exc).__name__}")

    def root(self, workdir: str) -> str:
        """SFTP starts in the login directory and expands nothing."""
        return home_relative(workdir)

    def listdir(self, path: str) -> dict[str, RemoteEntry] | None:
        """One round trip per directory, whatever the number of files."""
        try:
            found = self._sftp.listdir_attr(path)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise self._fail("list", path, exc) from None
        except (EOFError, paramiko.SSHException) as exc:
            raise self._fail("list", path, exc) from None
        return {a.filename: _entry(a.st_mode or 0, a.st_size or 0, a.st_mtime or 0) for a in found}

    def readlink(self, path: str) -> str:
        """The link's target as stored."""
        try:
            return self._sftp.readlink(path) or ""
        except CONNECTION_ERRORS as exc:
            raise self._fail("read link", path, exc) from None

    def mkdir(self, path: str) -> None:
        """Create one directory."""
        try:
            self._sftp.mkdir(path)
        except CONNECTION_ERRORS as exc:
            raise self._fail("create directory", path, exc) from None

    def put(self, local: str, path: str, mode: int, mtime_ns: int) -> None:
        """Upload (pipelined), set mode and time, rename into place."""
        temporary = _temporary(path)
        seconds = mtime_ns // 1_000_000_000
        try:
            # The callback runs after every chunk: the place to notice a cancel.
            self._sftp.put(local, temporary, callback=self._check, confirm=False)
            self._sftp.chmod(temporary, mode)
            self._sftp.utime(temporary, (seconds, seconds))
            self._rename(temporary, path)
        except _Cancelled:
            self._discard(temporary)
            raise TransportError(self.host, "cancelled") from None
        except CONNECTION_ERRORS as exc:
            self._discard(temporary)
            if isinstance(exc, OSError) and exc.filename == local:  # here, not on the host
                why = exc.strerror or str(exc)
                raise TransportError(self.host, f"cannot read {local} here: {why}") from None
            raise self._fail("write", path, exc) from None

    def _check(self, sent: int, total: int) -> None:
        if self._cancelled.is_set():
            raise _Cancelled

    def symlink(self, target: str, path: str) -> None:
        """Create the link under a temporary name, rename it into place."""
        temporary = _temporary(path)
        try:
            self._sftp.symlink(target, temporary)
            self._rename(temporary, path)
        except CONNECTION_ERRORS as exc:
            self._discard(temporary)
            raise self._fail("create link", path, exc) from None

    def chmod(self, path: str, mode: int) -> None:
        """Set permissions."""
        try:
            self._sftp.chmod(path, mode)
        except CONNECTION_ERRORS as exc:
            raise self._fail("chmod", path, exc) from None

    def _rename(self, source: str, path: str) -> None:
        try:
            self._sftp.posix_rename(source, path)  # replaces atomically (OpenSSH extension)
        except OSError:
            # Servers without the extension refuse to rename onto an existing name.
            with contextlib.suppress(OSError):
                self._sftp.remove(path)
            self._sftp.rename(source, path)

    def _discard(self, temporary: str) -> None:
        with contextlib.suppress(*CONNECTION_ERRORS):
            self._sftp.remove(temporary)

    def cancel(self) -> None:
        """Stop an upload in progress after its current chunk."""
        self._cancelled.set()

    def close(self) -> None:
        """Close the SFTP channel (the SSH connection stays open)."""
        close_quietly(self._sftp)


class LocalFiles:
    """This machine's file system, for ``localhost`` hosts whose workdir is elsewhere."""

    host = "localhost"

    def _fail(self, what: str, path: str, exc: OSError) -> TransportError:
        return TransportError(self.host, f"cannot {what} {path}: {exc.strerror or exc}")

    def root(self, workdir: str) -> str:
        """As the local commands see it (the same rules as SFTP's: :func:`local_path`)."""
        return local_path(workdir)

    def listdir(self, path: str) -> dict[str, RemoteEntry] | None:
        """``lstat`` of every entry."""
        try:
            with os.scandir(path) as found:
                return {
                    e.name: _entry(s.st_mode, s.st_size, s.st_mtime)
                    for e in found
                    for s in [e.stat(follow_symlinks=False)]
                }
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._fail("list", path, exc) from None

    def readlink(self, path: str) -> str:
        """The link's target."""
        try:
            return os.readlink(path)
        except OSError as exc:
            raise self._fail("read link", path, exc) from None

    def mkdir(self, path: str) -> None:
        """Create one directory."""
        try:
            os.mkdir(path)
        except OSError as exc:
            raise self._fail("create directory", path, exc) from None

    def put(self, local: str, path: str, mode: int, mtime_ns: int) -> None:
        """Copy, set mode and time, rename into place."""
        temporary = _temporary(path)
        try:
            shutil.copyfile(local, temporary)
            os.chmod(temporary, mode)
            os.utime(temporary, ns=(mtime_ns, mtime_ns))
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise self._fail("write", path, exc) from None

    def symlink(self, target: str, path: str) -> None:
        """Create the link under a temporary name, rename it into place."""
        temporary = _temporary(path)
        try:
            os.symlink(target, temporary)
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise self._fail("create link", path, exc) from None

    def chmod(self, path: str, mode: int) -> None:
        """Set permissions."""
        try:
            os.chmod(path, mode)
        except OSError as exc:
            raise self._fail("chmod", path, exc) from None

    def cancel(self) -> None:
        """Local copies are fast: the copy in progress is allowed to finish."""

    def close(self) -> None:
        """Nothing to release."""
