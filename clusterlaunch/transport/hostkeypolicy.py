"""The two host-key policies of the paramiko client: ``strict`` refuses an unknown key,
``accept-new`` records it as OpenSSH's ``StrictHostKeyChecking accept-new`` does."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import paramiko

from clusterlaunch.core.errors import HostKeyError


def known_without_port(client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> bool:
    """Whether ``key`` of a host unknown as ``[host]:port`` is on a line for ``host``: ssh then
    accepts it, recording nothing; another key there leaves it unknown, not changed."""
    if not hostname.startswith("["):
        return False  # port 22: the plain name was the one looked up
    keys = client._system_host_keys  # type: ignore[attr-defined]  # a TolerantHostKeys
    return keys.known_at(hostname[1:].rsplit("]:", 1)[0], key) is not None


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking accept-new``: record unknown keys."""

    def __init__(self, known_hosts: str, lock: threading.Lock, hashed: bool = False) -> None:
        self._path = Path(known_hosts)
        self._lock = lock
        self._hashed = hashed  # HashKnownHosts yes: ssh writes |1|salt|hash, not the name

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if known_without_port(client, hostname, key):
            return
        name = paramiko.HostKeys.hash_host(hostname) if self._hashed else hostname
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            if self._path.parent == Path.home() / ".ssh":  # the one folder ssh makes for it
                self._path.parent.mkdir(mode=0o700, exist_ok=True)
            # Elsewhere a missing folder (or a file that cannot be written) leaves the key
            # accepted for this connection and unrecorded, as ssh does.
            with contextlib.suppress(OSError), self._path.open("a", encoding="ascii") as out:
                out.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, saying which setting made it strict."""

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        if not known_without_port(client, hostname, key):
            raise HostKeyError(
                hostname,
                f"unknown host key ({self._origin}); add it to known_hosts "
                "(ssh-keyscan) or connect once with --host-key-policy accept-new",
            )
