"""Two hosts-file entries that reach one sshd once the SSH config is applied.

The file's own check (:mod:`clusterlaunch.core.hostfile`) compares names and ports
as written; ``{host: node0}`` and ``{host: node0, port: 22222}`` differ there, yet
with ``Port 22222`` in the SSH config they are one machine, and the job would run
two node ranks on it. Pure: it compares targets already resolved.
"""

from __future__ import annotations

from collections.abc import Sequence

from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostnames import canonical_address
from clusterlaunch.core.hostport import host_port
from clusterlaunch.core.model import HostSpec, Inventory, SshTarget


def refuse_same_server(inventory: Inventory, targets: Sequence[SshTarget]) -> None:
    """One line naming both entries when two reach the same (user, HostName, port)."""
    seen: dict[tuple[object, ...], HostSpec] = {}
    for spec, target in zip(inventory.hosts, targets, strict=True):
        if spec.is_local:  # no sshd; a second localhost is a duplicate name already
            continue
        # The same HostName behind another jump host is another machine.
        key = (
            target.user,
            _server_name(target),
            target.port,
            target.proxy_jump,
            target.proxy_command,
        )
        first = seen.setdefault(key, spec)
        if first is not spec:
            raise HostsFileError(
                inventory.path,
                spec.line,
                "host",
                f"{_entry(spec)} reaches the same sshd as {_entry(first)} at line {first.line} "
                f"({_server(target)} after your SSH config); "
                "list each host once and raise its gpus instead",
            )


def _server_name(target: SshTarget) -> str:
    """The HostName as the sshd it reaches: an address in one spelling (``FD42:6:0::11`` is
    ``fd42:6::11``), a name lowercased as ssh looks it up."""
    return canonical_address(target.hostname) or target.hostname.lower()


def _entry(spec: HostSpec) -> str:
    return spec.host if spec.port is None else f"{spec.host} (port: {spec.port})"


def _server(target: SshTarget) -> str:
    user = f"{target.user}@" if target.user else ""
    return f"{user}{host_port(target.hostname, target.port)}"
