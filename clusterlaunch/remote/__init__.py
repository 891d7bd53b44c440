"""Programs that run on the hosts, shipped as source over the SSH channel's stdin.

They use the standard library only (Python >= 3.8), so a host needs nothing
installed but Python. See :mod:`clusterlaunch.core.commands` for the bootstrap.
"""

from __future__ import annotations

from importlib import resources

# Each remote program is its modules concatenated in order, minus the lines
# marked "# bundle: strip" (the package imports that only work locally, where
# the modules are also imported by the unit tests).
BUNDLES = {
    "agent": ("proctree", "records", "rootcause", "tail", "wire", "agent"),
    "probe": ("proctree", "records", "accel", "probe"),
    "jobctl": ("proctree", "records", "jobctl"),
}
_STRIP_MARK = b"# bundle: strip"


def program_source(name: str) -> bytes:
    """The source of remote program ``name`` exactly as it is sent."""
    if name not in BUNDLES:
        raise ValueError(f"unknown remote program {name!r}")
    package = resources.files(__package__)
    parts = []
    for module in BUNDLES[name]:
        text = package.joinpath(f"{module}.py").read_bytes()
        kept = [line for line in text.splitlines(keepends=True) if _STRIP_MARK not in line]
        parts.append(b"".join(kept))
    return b"\n".join(parts)
