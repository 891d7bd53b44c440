"""Programs that run on the hosts, shipped as source over the SSH channel's stdin.

They use the standard library only (Python >= 3.8), so a host needs nothing
installed but Python. See :mod:`clusterlaunch.core.commands` for the bootstrap.
"""

from __future__ import annotations

import functools
from importlib import resources

# Each remote program is its modules concatenated in order, minus the lines
# marked "# bundle: strip" (the package imports that only work locally, where
# the modules are also imported by the unit tests). A bare name is a module of
# this package; "core/protocol" names a module elsewhere in clusterlaunch that
# the hosts need too (pure, stdlib only, no ``from __future__``): the wire
# protocol, and core/exits, the exit statuses the controller uses too.
_CHECKS = ("core/exits", "core/protocol", "proctree", "records", "accel", "torchfiles", "checks")
"""The preflight's checks and what they use: the probe (``check``) and the agent (``run``)."""
BUNDLES = {
    "agent": (*_CHECKS, "gate", "rootcause", "tail", "wire", "agent"),
    "probe": (*_CHECKS, "probe"),
    "jobctl": ("core/exits", "core/protocol", "proctree", "records", "stacks", "jobctl"),
    "doctor": ("core/exits", "core/protocol", "torchfiles", "hostfacts", "doctor"),
}
_STRIP_MARK = b"# bundle: strip"


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
    place = resources.files("clusterlaunch")
    for folder in parts[:-1]:
        place = place.joinpath(folder)
    return place.joinpath(f"{parts[-1]}.py").read_bytes()
