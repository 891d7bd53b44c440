"""Host keys: known_hosts parsed once per run, the two policies, the changed-key message.

Keys are always checked. ``strict`` refuses an unknown key; ``accept-new``
records it (like OpenSSH's ``StrictHostKeyChecking accept-new``); a *changed*
key is refused under both (paramiko raises ``BadHostKeyException`` before any
policy is asked).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from clusterlaunch.core.errors import HostKeyError
from clusterlaunch.core.model import SshTarget


class AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """OpenSSH's ``StrictHostKeyChecking accept-new``: record unknown keys, refuse changed ones.

    (A changed key never reaches a policy: paramiko raises BadHostKeyException.)
    """

    def __init__(self, known_hosts: str, lock: threading.Lock) -> None:
        self._path = Path(known_hosts)
        self._lock = lock

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with self._path.open("a", encoding="ascii") as handle:
                handle.write(line)
        client.get_host_keys().add(hostname, key.get_name(), key)


class StrictPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse unknown keys, saying which setting made it strict."""

    def __init__(self, origin: str) -> None:
        self._origin = origin

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        raise HostKeyError(
            hostname,
            f"unknown host key ({self._origin}); add it to known_hosts "
            "(ssh-keyscan) or connect once with --host-key-policy accept-new",
        )


@dataclass(frozen=True)
class Marker:
    """A ``@cert-authority`` or ``@revoked`` line of a known_hosts file."""

    kind: str
    patterns: str
    where: str
    """``file:line``."""

    def applies_to(self, target: SshTarget) -> bool:
        """True when the line's host patterns match ``target`` as ssh names it."""
        return host_matches(self.patterns, known_hosts_name(target))


class TolerantHostKeys(paramiko.HostKeys):
    """paramiko's HostKeys, loaded the way ssh reads known_hosts.

    paramiko's own ``load`` raised ``InvalidHostKey`` on a ``@cert-authority``
    line, failing every connection, even to hosts with plain keys; ssh skips
    lines it cannot use. Marker lines are kept aside (:attr:`markers`) so a
    host they apply to can be refused by name instead of silently connected
    to differently. Duplicate lines are not merged (paramiko's merge made
    loading O(lines²)); any matching key is accepted, as in ssh.

    Lines are indexed by their plain names, so a lookup (one per connection)
    reads only the lines that can match: paramiko's scans every line, O(hosts²)
    for a run whose file lists every host (1,024 lookups in a 1,024-line file:
    232 ms of CPU; 4,096 would take ~3.7 s). Hashed names (``|1|``) can only be
    tried one by one, as ssh does, and so can pattern lines (``*.cluster``,
    ``!bastion,10.1.*``), which paramiko itself never matches: to it a host
    that ssh finds under a pattern was unknown, so under ``accept-new`` a key
    that ssh refuses as changed was recorded and used.
    """

    def __init__(self) -> None:
        super().__init__()
        self.markers: list[Marker] = []
        self._by_name: dict[str, list[int]] = {}  # plain name -> positions in _entries
        self._hashed: list[int] = []  # positions of lines with a hashed name
        self._patterned: list[int] = []  # positions of lines with a wildcard or a negation
        self._origins: list[str] = []  # "FILE:LINE" of each entry ("" for one added here)

    def lookup(self, hostname: str) -> Any:
        """paramiko's lookup (its matching, its result) over the lines that may match; a
        pattern line that matches as ssh matches it takes part as a line naming the host."""
        entries = self._entries  # type: ignore[attr-defined]
        found = {at: entries[at] for at in {*self._by_name.get(hostname, ()), *self._hashed}}
        for at in self._patterned:
            entry = entries[at]
            if host_matches(",".join(entry.hostnames), hostname):
                found[at] = paramiko.hostkeys.HostKeyEntry([hostname], entry.key)
        view = paramiko.HostKeys()
        view._entries = [found[at] for at in sorted(found)]  # type: ignore[attr-defined]
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
        candidates = {*self._by_name.get(hostname, ()), *self._hashed, *self._patterned}
        for at in sorted(candidates):
            patterns = ",".join(entries[at].hostnames)
            same = entries[at].key.asbytes() == key.asbytes()
            if self._origins[at] and same and host_matches(patterns, hostname):
                return self._origins[at], patterns
        return None

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
        if _is_pattern_list(",".join(names)):
            self._patterned.append(at)  # the whole list decides (a negation vetoes)
            return
        if any(name.startswith("|1|") for name in names):
            self._hashed.append(at)
        for name in names:
            if not name.startswith("|1|"):  # a hashed one never equals a looked-up name
                self._by_name.setdefault(name, []).append(at)


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
        """The known keys that apply to ``target`` (global file plus its own files)."""
        files = ("/etc/ssh/ssh_known_hosts", *target.known_hosts_files)
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

        ``@revoked``: paramiko cannot refuse a revoked key. ``@cert-authority``:
        paramiko cannot check host certificates; it matters when no plain key
        is known for the host (else paramiko checks that key, as ssh would),
        and with accept-new paramiko would even record the plain key, bypassing
        the CA.
        """
        keys = self.keys_for(target)
        applying = [marker for marker in keys.markers if marker.applies_to(target)]
        if not applying:
            return None  # most files have no marker
        plain_key_known = keys.lookup(known_hosts_name(target)) is not None
        for marker in applying:
            if marker.kind == "@revoked" or not plain_key_known:
                return marker
        return None


def ssh_host_name(target: SshTarget) -> str:
    """The host name as ssh uses it: lowercased (``HostName MiXeD.Example`` is checked
    and recorded in known_hosts as ``mixed.example``, and is ``%h``)."""
    return target.hostname.lower()


def known_hosts_name(target: SshTarget) -> str:
    """The name ssh looks a host up by in known_hosts (``[host]:port`` off port 22)."""
    host = ssh_host_name(target)
    return host if target.port == 22 else f"[{host}]:{target.port}"


def host_matches(patterns: str, name: str) -> bool:
    """ssh's known_hosts pattern list: ``*``/``?`` wildcards, ``!`` negation, hashed ``|1|``."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            hit = _hashed_name_matches(pattern, name)
        else:
            wildcard = re.escape(pattern.lower()).replace(r"\*", ".*").replace(r"\?", ".")
            hit = re.fullmatch(wildcard, name.lower()) is not None
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def _hashed_name_matches(pattern: str, name: str) -> bool:
    """``|1|salt|hash``: HMAC-SHA1 of the name under the salt (ssh's HashKnownHosts)."""
    try:
        salt, digest = (base64.b64decode(part) for part in pattern[3:].split("|", 1))
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


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
    if line and _is_pattern_list(line[1]):  # ssh-keygen -R deletes it whole (OpenSSH 9.2)
        fix += f" (which deletes the line `{line[1]}`, for every host it names)"
    return (
        f"HOST KEY CHANGED (known {exc.expected_key.get_name()} {exc.expected_key.fingerprint}"
        f"{where}, offered {exc.key.get_name()} {exc.key.fingerprint}); refusing to connect. "
        f"If the host was really reinstalled, {fix}"
    )


def _is_pattern_list(patterns: str) -> bool:
    """Whether a known_hosts line's names hold a wildcard or a negation."""
    return any(name.startswith("!") or "*" in name or "?" in name for name in patterns.split(","))
