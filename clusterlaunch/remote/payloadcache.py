"""The user's cache of the remote programs' payloads (the controller's side: never sent).

Building a payload compiles its program (32-37 ms of CPU for the agent, a third of a
command's start), so it is kept in ``$XDG_CACHE_HOME/clusterlaunch`` (else
``~/.cache/clusterlaunch``), one file per program, source and interpreter, and read back
by later commands. What is read is sent to every host and run there, so a file is used
only if it matches its seal: the payload is followed by the SHA-256 of the program's
source and the payload. One cut short or with a flipped bit is built again and replaced;
it was sent as it was, and every command failed on every host, as "python: ... is not a
Python". Checking costs hashing the payload (67-136 KB): 0.05-0.1 ms here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path

from clusterlaunch.core.bootstrap import is_payload_for_this_python
from clusterlaunch.core.defaults import PAYLOAD_KEPT_S

SEAL_SIZE = 32
"""The SHA-256 after the payload in a stored file."""


class StoredPayload:
    """The cached payload of one program's ``source``, compiled by a Python of cache ``tag``."""

    def __init__(self, name: str, tag: str, source: bytes) -> None:
        self._source_digest = hashlib.sha256(source)
        self.path = stored_path(name, tag, self._source_digest.hexdigest()[:16])
        self._older = payload_file(name, tag, "*")

    def seal(self, payload: bytes) -> bytes:
        """What follows ``payload`` in its file: the digest of the source, then the payload."""
        digest = self._source_digest.copy()
        digest.update(payload)
        return digest.digest()

    def read(self) -> bytes | None:
        """The stored payload, if there is one, whole and for this Python."""
        try:
            kept = self.path.read_bytes()
        except OSError:
            return None
        payload, seal = kept[:-SEAL_SIZE], kept[-SEAL_SIZE:]
        if len(kept) > SEAL_SIZE and seal == self.seal(payload):
            return payload if is_payload_for_this_python(payload) else None
        return None

    def write(self, payload: bytes) -> None:
        """Store ``payload`` (sealed) whole or not at all (a rename), then remove the same
        program's payloads of other sources written more than ``PAYLOAD_KEPT_S`` ago; where
        the cache cannot be written, nothing (the next command builds the payload again)."""
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        except OSError:
            return
        try:
            os.fchmod(handle, 0o644)  # as Python's own compiled files: readable by all
            with os.fdopen(handle, "wb") as out:
                out.write(payload + self.seal(payload))
            os.replace(temporary, path)
        except OSError:
            return
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        kept_since = time.time() - PAYLOAD_KEPT_S
        for other in path.parent.glob(self._older):
            with contextlib.suppress(OSError):  # (another command may remove it first)
                if other != path and other.stat().st_mtime < kept_since:
                    other.unlink()


def stored_path(name: str, tag: str, digest: str) -> Path:
    """Where the payload of program ``name`` whose source has ``digest`` is kept."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, empty or relative: ignored, as the XDG spec says
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "clusterlaunch" / payload_file(name, tag, digest)


def payload_file(name: str, tag: str, digest: str) -> str:
    """The stored payload's file name (``digest`` ``*``: a glob for every source's)."""
    return f"{name}.{tag}.{digest}.payload"
