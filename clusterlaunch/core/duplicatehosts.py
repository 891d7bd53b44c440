"""A host name listed in two entries of a hosts file: refused as the file is read.

Every connection, preflight report and rank prefix is kept by the host's name as
written, so two entries of one name are one connection, whatever else they say:
``{host: "::1", port: 23010}`` and ``{host: "::1", port: 23011}`` ran all their
processes on the sshd of the last port, and the preflight blamed a job "already
running" there. Two entries that reach one sshd under different names are
:mod:`clusterlaunch.core.sameserver`'s, once the SSH config is applied. Pure.
"""

from __future__ import annotations

from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.model import HostSpec, Inventory

_ONCE = "list each host once and raise its gpus instead"


def refuse_duplicates(inventory: Inventory) -> None:
    """One line naming the second entry of a name, the first one's line and the fix."""
    seen: dict[str, HostSpec] = {}
    for spec in inventory.hosts:
        first = seen.setdefault(spec.host, spec)
        if first is spec:
            continue
        differs = _differences(first, spec)
        if not differs:
            problem = f"{spec.host} is listed twice (also at line {first.line}); {_ONCE}"
        else:
            problem = _two_servers(spec, first, differs)
        raise HostsFileError(inventory.path, spec.line, "host", problem)


def _differences(first: HostSpec, second: HostSpec) -> list[str]:
    """The keys that tell two entries of one name apart: ``port``, ``user`` (which
    ``localhost`` ignores: two of them are one machine)."""
    if second.is_local:
        return []
    return [key for key in ("port", "user") if getattr(first, key) != getattr(second, key)]


def _two_servers(spec: HostSpec, first: HostSpec, differs: list[str]) -> str:
    """Two entries of one name that mean two logins (another port or user)."""
    config = " / ".join(
        [f"HostName {spec.host}"]
        + [f"{key.capitalize()} {getattr(spec, key)}" for key in differs if getattr(spec, key)]
    )
    return (
        f"{spec.host} ({_written(spec, differs)}) is also listed at line {first.line} "
        f"({_written(first, differs)}), and clusterlaunch keeps one connection per host "
        f"name; give each entry its own name: in your SSH config (Host c1 / {config}), "
        "then host: c1 here (or, if they are one machine, list it once and raise its gpus)"
    )


def _written(spec: HostSpec, keys: list[str]) -> str:
    return ", ".join(
        f"{key}: {getattr(spec, key)}" if getattr(spec, key) is not None else f"no {key}"
        for key in keys
    )
