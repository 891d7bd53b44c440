"""Programs that run on the hosts, shipped as source over the SSH channel's stdin.

They use the standard library only (Python >= 3.8), so a host needs nothing
installed but Python. See :mod:`clusterlaunch.core.commands` for the bootstrap.
"""

from __future__ import annotations

from importlib import resources

# Each remote program is its modules concatenated in order, minus the lines
# marked "# bundle: strip" (the package imports that only work locally, where
# the modules are also imported by the unit tests). A name is a module of this
# package, or "subpackage/module" of clusterlaunch (stdlib-only ones, such as
# core/exits, the exit statuses the controller also uses).
BUNDLES = {
    "agent": ("core/exits", "proctree", "records", "rootcause", "tail", "wire", "agent"),
    "probe": ("core/exits", "proctree", "records", "probe"),
    "jobctl": ("core/exits", "proctree", "records", "jobctl"),
}
_STRIP_MARK = b"# bundle: strip"


def program_source(name: str) -> bytes:
    """The source of remote program ``name`` exactly as it is sent."""
    if name not in BUNDLES:
        raise ValueError(f"unknown remote program {name!r}")
    root = resources.files("clusterlaunch")
    parts = []
    for module in BUNDLES[name]:
        subpackage, _, leaf = module.rpartition("/")
        text = root.joinpath(subpackage or "remote").joinpath(f"{leaf}.py").read_bytes()
        kept = [line for line in text.splitlines(keepends=True) if _STRIP_MARK not in line]
        parts.append(b"".join(kept))
    return b"\n".join(parts)
