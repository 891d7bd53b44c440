"""Programs that run on the hosts, shipped over the SSH channel's stdin.

They use the standard library only (Python >= 3.8), so a host needs nothing
installed but Python. See :mod:`clusterlaunch.core.bootstrap` for the bootstrap
and the payload it reads (the program compiled, and its source).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from clusterlaunch.core.bootstrap import encode_payload
from clusterlaunch.remote.payloadcache import StoredPayload

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
    "listener",
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
        "rewrites",
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
        "listener",
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

    Kept in the user's cache (:mod:`~clusterlaunch.remote.payloadcache`), keyed by the
    source's digest and the interpreter's cache tag: compiling the agent (79 KB of
    source) costs 32-37 ms of CPU here, a third of a command's start, reading it back
    and checking it 0.1 ms. Never in the installed package: a file there is not in the
    install's record, so ``pip uninstall`` left it, and with it a folder that a later
    install imported as a namespace package. With ``PYTHONDONTWRITEBYTECODE`` nothing new
    is stored.
    """
    source = program_source(name)
    tag = sys.implementation.cache_tag
    if tag is None:  # this Python keeps no compiled files
        return encode_payload(name, source)
    stored = StoredPayload(name, tag, source)
    payload = stored.read()
    if payload is None:
        payload = encode_payload(name, source)
        if not sys.dont_write_bytecode:
            stored.write(payload)
    return payload
