"""The user's cache of the remote programs' payloads (the controller's side: never sent).

Building a payload compiles its program (32-37 ms of CPU for the agent, a third of a
command's start), so it is kept in ``$XDG_CACHE_HOME/clusterlaunch`` (else
``~/.cache/clusterlaunch``), one file per program, source and interpreter, and read back
by later commands. What is read is sent to every host and run there as this user, so a
file is used only when

* its folder and itself are this user's and neither group nor others may write them
  (:func:`records.ours_alone`, the test of the state folders on the hosts): a cache on a
  shared folder, or root's command under another user's ``HOME`` (sudo), ran what someone
  else wrote on every host. Another user's folder is neither read nor written; both are
  opened through the folder's descriptor, no symbolic link followed, so what was checked
  is what is read;
* it matches its seal: the payload is followed by the SHA-256 of the program's source and
  the payload. One cut short or with a flipped bit is built again and replaced; it was
  sent as it was, and every command failed on every host, as "python: ... is not a
  Python". Checking costs hashing the payload (67-136 KB): 0.05-0.1 ms here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
from pathlib import Path

from clusterlaunch.core.bootstrap import is_payload_for_this_python
from clusterlaunch.core.defaults import PAYLOAD_KEPT_S
from clusterlaunch.remote.records import ours_alone

SEAL_SIZE = 32
"""The SHA-256 after the payload in a stored file."""
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_SUFFIX = ".payload"


class StoredPayload:
    """The cached payload of one program's ``source``, compiled by a Python of cache ``tag``."""

    def __init__(self, name: str, tag: str, source: bytes) -> None:
        self._source_digest = hashlib.sha256(source)
        self.path = stored_path(name, tag, self._source_digest.hexdigest()[:16])
        self._others = f"{name}.{tag}."  # how this program's other payloads' names begin

    def seal(self, payload: bytes) -> bytes:
        """What follows ``payload`` in its file: the digest of the source, then the payload."""
        digest = self._source_digest.copy()
        digest.update(payload)
        return digest.digest()

    def read(self) -> bytes | None:
        """The stored payload, if there is one we may trust, whole and for this Python."""
        folder = _open_folder(self.path.parent)
        if folder is None:
            return None
        try:
            kept = _read_ours(self.path.name, folder)
        finally:
            os.close(folder)
        if kept is None or len(kept) <= SEAL_SIZE:
            return None
        payload, seal = kept[:-SEAL_SIZE], kept[-SEAL_SIZE:]
        ok = seal == self.seal(payload) and is_payload_for_this_python(payload)
        return payload if ok else None

    def write(self, payload: bytes) -> None:
        """Store ``payload`` (sealed) whole or not at all (a rename), then remove the same
        program's payloads of other sources written more than ``PAYLOAD_KEPT_S`` ago; where
        the cache cannot be written, or may not be trusted, nothing (the next command builds
        the payload again)."""
        _make_folder(self.path.parent)
        folder = _open_folder(self.path.parent, to_write=True)
        if folder is None:
            return
        try:
            if _replace(self.path.name, payload + self.seal(payload), folder):
                self._remove_older(folder)
        finally:
            os.close(folder)

    def _remove_older(self, folder: int) -> None:
        kept_since = time.time() - PAYLOAD_KEPT_S
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            if not name.startswith(self._others) or not name.endswith(_SUFFIX):
                continue
            with contextlib.suppress(OSError):  # (another command may remove it first)
                if name != self.path.name and _modified(name, folder) < kept_since:
                    os.unlink(name, dir_fd=folder)


def _make_folder(path: Path) -> None:
    """Make the cache folder ``path`` (0700) and those missing above it; root, only under a
    folder of root's: under another user's ``HOME`` (sudo keeps it) it made a folder of
    root's there, which that user's commands could no longer use."""
    with contextlib.suppress(OSError):
        below = next((above for above in (path, *path.parents) if os.path.lexists(above)), path)
        if below != path and (os.getuid() != 0 or os.stat(below).st_uid == 0):
            os.makedirs(path, 0o700, exist_ok=True)


def _open_folder(path: Path, to_write: bool = False) -> int | None:
    """A descriptor of the cache folder ``path``, if it is one this user alone may write in.

    ``to_write``: one of this user's that group or others may write in is first made one
    they may not. An older clusterlaunch made it as the umask said (0775 under Debian's
    002 for users with a group of their own); what it holds is checked file by file."""
    try:
        folder = os.open(path, _READ | os.O_DIRECTORY)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        found = os.fstat(folder)
        if to_write and ours_alone(found, others=0) and not ours_alone(found):
            os.fchmod(folder, stat.S_IMODE(found.st_mode) & ~0o022)
            found = os.fstat(folder)
        if ours_alone(found):
            return folder
    os.close(folder)
    return None


def _read_ours(name: str, folder: int) -> bytes | None:
    """The bytes of file ``name`` in ``folder``, if it is a file this user alone may write."""
    try:
        with open(os.open(name, _READ, dir_fd=folder), "rb") as file:
            found = os.fstat(file.fileno())
            return file.read() if ours_alone(found) and stat.S_ISREG(found.st_mode) else None
    except OSError:
        return None


def _replace(name: str, content: bytes, folder: int) -> bool:
    """Write file ``name`` in ``folder`` under another name, then rename it: a command reading
    it meanwhile finds the old file or the new one, never part of one."""
    temporary = f".{name}.{os.getpid()}.{os.urandom(4).hex()}"
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with open(os.open(temporary, create, 0o600, dir_fd=folder), "wb") as out:
            os.fchmod(out.fileno(), 0o644)  # as Python's own compiled files: readable by all
            out.write(content)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
        return True
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        return False


def _modified(name: str, folder: int) -> float:
    return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime


def stored_path(name: str, tag: str, digest: str) -> Path:
    """Where the payload of program ``name`` whose source has ``digest`` is kept."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, empty or relative: ignored, as the XDG spec says
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "clusterlaunch" / payload_file(name, tag, digest)


def payload_file(name: str, tag: str, digest: str) -> str:
    """The stored payload's file name."""
    return f"{name}.{tag}.{digest}{_SUFFIX}"
