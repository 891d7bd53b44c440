"""Host keys: known_hosts parsed once per run, the two policies, the changed-key message.

Keys are always checked. ``strict`` refuses an unknown key; ``accept-new`` records it (like
OpenSSH's ``StrictHostKeyChecking accept-new``); a *changed* key is refused under both (paramiko
raises ``BadHostKeyException`` before any policy is asked).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import paramiko

from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.hostnames import (
    host_matches,
    is_pattern_list,
    known_hosts_name,
    ssh_host_name,
)


def lookup_names(target: SshTarget) -> tuple[str, ...]:
    """The names ssh looks ``target``'s key up by: off port 22 ``[host]:port``, then, where
    that finds no key of the type, ``host`` ("checking without port identifier")."""
    return tuple(dict.fromkeys((known_hosts_name(target), ssh_host_name(target))))


@dataclass(frozen=True)
class Marker:
    """A ``@cert-authority`` or ``@revoked`` line of a known_hosts file."""

    kind: str
    patterns: str
    where: str
    """``file:line``."""


class TolerantHostKeys(paramiko.HostKeys):
    """paramiko's HostKeys, loaded the way ssh reads known_hosts.

    paramiko's own ``load`` raised ``InvalidHostKey`` on a ``@cert-authority`` line, failing
    every connection, even to hosts with plain keys; ssh skips lines it cannot use. Marker lines
    are kept aside (:attr:`markers`) so a host they apply to can be refused by name instead of
    silently connected to differently. Duplicate lines are not merged (paramiko's merge made
    loading O(lines²)); any matching key is accepted, as in ssh.

    Lines are indexed by their plain names, so a lookup (one per connection) reads only the
    lines that can match: paramiko's scans every line, O(hosts²) for a run whose file lists
    every host (1,024 lookups in a 1,024-line file: 232 ms of CPU; 4,096 would take ~3.7 s).
    Hashed names (``|1|``) can only be tried one by one, as ssh does, and so can pattern lines
    (``*.cluster``, ``!bastion,10.1.*``), which paramiko itself never matches: to it a host that
    ssh finds under a pattern was unknown, so under ``accept-new`` a key that ssh refuses as
    changed was recorded and used.
    """

    def __init__(self) -> None:
        super().__init__()
        self.markers: list[Marker] = []
        self._by_name: dict[str, list[int]] = {}  # plain name -> positions in _entries
        self._hashed: list[int] = []  # positions of lines with a hashed name
        self._patterned: list[int] = []  # positions of lines with a wildcard or a negation
        self._origins: list[str] = []  # "FILE:LINE" of each entry ("" for one added here)

    def lookup(self, hostname: str) -> Any:
        """paramiko's result (a mapping of key type to key) for the lines that name
        ``hostname`` as ssh matches names, pattern lines included, in file order.

        Where those lines hold several keys of one type, the type's key is equal to
        any of them, as ssh accepts a host whose key is on any line ("keep looking
        for HOST_OK"); paramiko compared the first line's alone, so a host whose
        key sat below an older line for it was refused as changed.
        """
        entries = self._entries  # type: ignore[attr-defined]
        by_type: dict[str, list[paramiko.PKey]] = {}
        for at in self._naming(hostname):
            known = by_type.setdefault(entries[at].key.get_name(), [])
            if all(key.asbytes() != entries[at].key.asbytes() for key in known):
                known.append(entries[at].key)
        view = paramiko.HostKeys()
        view._entries = [  # type: ignore[attr-defined]
            paramiko.hostkeys.HostKeyEntry([hostname], _one_key(keys)) for keys in by_type.values()
        ]
        return paramiko.HostKeys.lookup(view, hostname)

    def load(self, filename: Any) -> None:  # a path, as in paramiko
        """Add the usable lines of ``filename``."""
        with open(filename, encoding="utf-8", errors="replace") as handle:
            for lineno, raw in enumerate(handle, 1):
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                if line.startswith("@"):
                    fields = line.split()
                    if len(fields) >= 2:
                        self.markers.append(Marker(fields[0], fields[1], f"{filename}:{lineno}"))
                    continue
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(line, lineno)
                except (paramiko.SSHException, paramiko.hostkeys.InvalidHostKey, ValueError):
                    continue  # ssh skips a line it cannot parse, and so do we
                if entry is not None:
                    self._add(entry, f"{filename}:{lineno}")

    def add(self, hostname: str, keytype: str, key: paramiko.PKey) -> None:
        """paramiko's ``add``, indexed (connections only read; this keeps it true if not)."""
        before = len(self._entries)  # type: ignore[attr-defined]
        super().add(hostname, keytype, key)
        for at in range(before, len(self._entries)):  # type: ignore[attr-defined]
            self._origins.append("")
            self._index(at)

    def known_at(self, hostname: str, key: paramiko.PKey) -> tuple[str, str] | None:
        """``(FILE:LINE, its host patterns)`` of the first line that holds ``key`` for
        ``hostname`` as ssh matches names; None if no line read from a file does."""
        entries = self._entries  # type: ignore[attr-defined]
        for at in self._naming(hostname):
            if self._origins[at] and entries[at].key.asbytes() == key.asbytes():
                return self._origins[at], ",".join(entries[at].hostnames)
        return None

    def _naming(self, hostname: str) -> list[int]:
        """Positions of the lines that name ``hostname`` as ssh matches names, in file
        order: only the indexed lines that may (its name's, hashed ones, pattern ones)."""
        entries = self._entries  # type: ignore[attr-defined]
        candidates = {*self._by_name.get(hostname, ()), *self._hashed, *self._patterned}
        return [
            at
            for at in sorted(candidates)
            if host_matches(",".join(entries[at].hostnames), hostname)
        ]

    def _add(self, entry: paramiko.hostkeys.HostKeyEntry, origin: str) -> None:
        # ssh compares a plain name without regard to case (its patterns are lowercased);
        # paramiko exactly. Names are looked up lowercased (ssh_host_name), so stored so.
        entry.hostnames = [
            name if name.startswith("|1|") else name.lower() for name in entry.hostnames
        ]
        # The list paramiko's own load fills (unchanged since paramiko 1.x).
        self._entries.append(entry)  # type: ignore[attr-defined]
        self._origins.append(origin)
        self._index(len(self._entries) - 1)  # type: ignore[attr-defined]

    def _index(self, at: int) -> None:
        names = self._entries[at].hostnames  # type: ignore[attr-defined]
        if is_pattern_list(",".join(names)):
            self._patterned.append(at)  # the whole list decides (a negation vetoes)
            return
        if any(name.startswith("|1|") for name in names):
            self._hashed.append(at)
        for name in names:
            if not name.startswith("|1|"):  # a hashed one never equals a looked-up name
                self._by_name.setdefault(name, []).append(at)


class AnyOf:
    """Several known keys of one type for a host: equal to any of them; otherwise
    (name, fingerprint, bytes) the first, as ssh names the first offending line."""

    def __init__(self, keys: list[paramiko.PKey]) -> None:
        self.keys = keys

    def __eq__(self, other: object) -> bool:
        return any(key == other for key in self.keys)

    def __ne__(self, other: object) -> bool:  # paramiko's check: ``our_key != server_key``
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.keys[0], name)


def _one_key(keys: list[paramiko.PKey]) -> paramiko.PKey:
    """The key; for several of one type, an :class:`AnyOf` standing in for it (paramiko
    only compares it and reads its name, fingerprint and bytes)."""
    return keys[0] if len(keys) == 1 else cast(paramiko.PKey, AnyOf(keys))


class KnownHosts:
    """known_hosts files, parsed once per run and shared (read-only) by every connection.

    Parsing per connection is O(hosts) each, O(hosts²) for a run when the
    file lists every host (measured: 2.3 ms per line per connection). Also
    holds the lock under which ``accept-new`` appends a key.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._parsed: dict[tuple[str, ...], TolerantHostKeys] = {}

    def keys_for(self, target: SshTarget) -> TolerantHostKeys:
        """The known keys that apply to ``target`` (global files plus its own files)."""
        files = (*target.global_known_hosts_files, *target.known_hosts_files)
        with self.lock:
            keys = self._parsed.get(files)
            if keys is None:
                keys = TolerantHostKeys()
                for path in files:
                    if Path(path).is_file():
                        keys.load(path)  # several files merge, as in OpenSSH
                self._parsed[files] = keys
        return keys

    def unusable_marker(self, target: SshTarget) -> Marker | None:
        """A marker line paramiko cannot honour for ``target``, or None.

        ``@revoked``: paramiko cannot refuse a revoked key. ``@cert-authority``: paramiko
        cannot check host certificates; it matters when no plain key is known for the host
        (else paramiko checks that key, as ssh would), and with accept-new paramiko would even
        record the plain key, bypassing the CA. Off port 22 the lines for plain ``host`` count
        too, as ssh reads them when ``[host]:port`` has no key
        (``hostkeypolicy.known_without_port``).
        """
        keys = self.keys_for(target)
        names = lookup_names(target)
        applying = [m for m in keys.markers if any(host_matches(m.patterns, n) for n in names)]
        if not applying:
            return None  # most files have no marker
        plain_key_known = any(keys.lookup(name) is not None for name in names)
        for marker in applying:
            if marker.kind == "@revoked" or not plain_key_known:
                return marker
        return None


def changed_key_message(
    target: SshTarget, exc: paramiko.BadHostKeyException, keys: TolerantHostKeys
) -> str:
    """What ssh says of a changed key, and where the known one is written (as the OpenSSH
    client's message, from ssh's "Offending key in FILE:LINE")."""
    name = known_hosts_name(target)
    line = keys.known_at(name, exc.expected_key)
    where = f" in {line[0]}" if line else ""
    file = (
        line[0].rsplit(":", 1)[0]
        if line
        else (target.known_hosts_files or ("~/.ssh/known_hosts",))[0]
    )
    fix = f"remove the old key: ssh-keygen -R '{name}' -f {file}"
    if line and is_pattern_list(line[1]):  # ssh-keygen -R deletes it whole (OpenSSH 9.2)
        fix += f" (which deletes the line `{line[1]}`, for every host it names)"
    return (
        f"HOST KEY CHANGED (known {exc.expected_key.get_name()} {exc.expected_key.fingerprint}"
        f"{where}, offered {exc.key.get_name()} {exc.key.fingerprint}); refusing to connect. "
        f"If the host was really reinstalled, {fix}"
    )
