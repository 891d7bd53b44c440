"""Programs that run on the hosts, shipped over the SSH channel's stdin.

They use the standard library only (Python >= 3.8), so a host needs nothing
installed but Python. See :mod:`clusterlaunch.core.bootstrap` for the bootstrap
and the payload it reads (the program compiled, and its source).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

from clusterlaunch.core.bootstrap import encode_payload, is_payload_for_this_python
from clusterlaunch.core.defaults import PAYLOAD_KEPT_S

# Each remote program is its modules concatenated in order, minus the lines
# marked "# bundle: strip" (the package imports that only work locally, where
# the modules are also imported by the unit tests). A bare name is a module of
# this package; "core/protocol" names a module elsewhere in clusterlaunch that
# the hosts need too (pure, stdlib only, no ``from __future__``): the wire
# protocol, and core/exits, the exit statuses the controller uses too.
_CHECKS = (
    "core/exits",
    "core/protocol",
    "core/hostport",
    "proctree",
    "hostlimits",
    "records",
    "recordfiles",
    "claims",
    "diskspace",
    "scratch",
    "accel",
    "torchfiles",
    "execformat",
    "findmodule",
    "checks",
)
"""The preflight's checks and what they use: the probe (``check``) and the agent (``run``)."""
BUNDLES = {
    "agent": (
        *_CHECKS,
        "channel",
        "teardown",
        "gate",
        "rootcause",
        "tail",
        "wire",
        "spawn",
        "storewait",
        "agent",
    ),
    "probe": (*_CHECKS, "channel", "teardown", "probe"),
    "jobctl": (
        "core/exits",
        "core/protocol",
        "proctree",
        "records",
        "recordfiles",
        "claims",
        "storewait",
        "stacks",
        "accel",
        "teardown",
        "jobctl",
    ),
    "doctor": (
        "core/exits",
        "core/protocol",
        "core/hostport",
        "proctree",
        "records",
        "recordfiles",
        "claims",
        "diskspace",
        "torchfiles",
        "hostfacts",
        "accel",
        "teardown",
        "doctor",
    ),
}
_STRIP_MARK = b"# bundle: strip"
_PACKAGE = Path(__file__).parent.parent
"""The installed clusterlaunch package's folder."""


@functools.cache  # the same for every host of a run: read and joined once
def program_source(name: str) -> bytes:
    """The source of remote program ``name`` exactly as it is sent."""
    if name not in BUNDLES:
        raise ValueError(f"unknown remote program {name!r}")
    parts = []
    for module in BUNDLES[name]:
        text = _module_bytes(module)
        kept = [line for line in text.splitlines(keepends=True) if _STRIP_MARK not in line]
        parts.append(b"".join(kept))
    return b"\n".join(parts)


def _module_bytes(module: str) -> bytes:
    """``wire`` → this package's wire.py; ``core/protocol`` → clusterlaunch/core/protocol.py."""
    parts = module.split("/") if "/" in module else ["remote", module]
    # The package's own files, not importlib.resources: its import (zipfile, its readers
    # and adapters) cost ~5 ms of a ~105 ms start (a wheel install in a clean venv: 4.4 ms
    # less CPU for `exec` over the OpenSSH client, paired; paramiko imports it anyway).
    return _PACKAGE.joinpath(*parts[:-1], f"{parts[-1]}.py").read_bytes()


@functools.cache  # the same for every host of a run: built (or read) once
def program_payload(name: str) -> bytes:
    """The bytes sent for remote program ``name``: what the bootstrap reads.

    Kept in the user's cache (``$XDG_CACHE_HOME/clusterlaunch``, else
    ``~/.cache/clusterlaunch``), keyed by the source's digest and the interpreter's
    cache tag: compiling the agent (79 KB of source) costs 32-37 ms of CPU here, a
    third of a command's start, reading it back 0.02 ms. Never in the installed
    package: a file there is not in the install's record, so ``pip uninstall`` left
    it, and with it a folder that a later install imported as a namespace package.
    With ``PYTHONDONTWRITEBYTECODE`` nothing new is stored.
    """
    source = program_source(name)
    tag = sys.implementation.cache_tag
    if tag is None:  # this Python keeps no compiled files
        return encode_payload(name, source)
    stored = _stored_payload_path(name, tag, source)
    with contextlib.suppress(OSError):
        payload = stored.read_bytes()
        if is_payload_for_this_python(payload):
            return payload
    payload = encode_payload(name, source)
    if not sys.dont_write_bytecode:
        _store(stored, payload, older=_payload_file(name, tag, "*"))
    return payload


def _stored_payload_path(name: str, tag: str, source: bytes) -> Path:
    """Where a payload of this source is kept: the user's cache."""
    file = _payload_file(name, tag, hashlib.sha256(source).hexdigest()[:16])
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, empty or relative: ignored, as the XDG spec says
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "clusterlaunch" / file


def _payload_file(name: str, tag: str, digest: str) -> str:
    """The stored payload's file name (``digest`` ``*``: a glob for every source's)."""
    return f"{name}.{tag}.{digest}.payload"


def _store(path: Path, payload: bytes, older: str) -> None:
    """Write ``path`` whole or not at all (a rename), then remove the other files matching
    the glob ``older`` (the same program's payloads for other sources) written more than
    ``PAYLOAD_KEPT_S`` ago; where the cache cannot be written, nothing (the next command
    builds the payload again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        return
    try:
        os.fchmod(handle, 0o644)  # as Python's own compiled files: readable by all
        with os.fdopen(handle, "wb") as out:
            out.write(payload)
        os.replace(temporary, path)
    except OSError:
        return
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    kept_since = time.time() - PAYLOAD_KEPT_S
    for other in path.parent.glob(older):
        with contextlib.suppress(OSError):  # (another command may remove it first)
            if other != path and other.stat().st_mtime < kept_since:
                other.unlink()
