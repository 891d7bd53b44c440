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
    """

    def __init__(self) -> None:
        super().__init__()
        self.markers: list[Marker] = []

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
                    # The list paramiko's own load fills (unchanged since paramiko 1.x).
                    self._entries.append(entry)  # type: ignore[attr-defined]


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
            # Most files have no marker: no lookup, which scans every line (256 hosts'
            # lookups in a 256-line file: 65,536 name matches, ~0.1 s of the controller).
            return None
        plain_key_known = keys.lookup(known_hosts_name(target)) is not None
        for marker in applying:
            if marker.kind == "@revoked" or not plain_key_known:
                return marker
        return None


def known_hosts_name(target: SshTarget) -> str:
    """The name ssh looks a host up by in known_hosts (``[host]:port`` off port 22)."""
    return target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"


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


def changed_key_message(target: SshTarget, exc: paramiko.BadHostKeyException) -> str:
    name = target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"
    files = " ".join(target.known_hosts_files) or "~/.ssh/known_hosts"
    return (
        f"HOST KEY CHANGED (known {exc.expected_key.get_name()} {exc.expected_key.fingerprint}, "
        f"offered {exc.key.get_name()} {exc.key.fingerprint}); refusing to connect. If the host "
        f"was really reinstalled, remove the old key: ssh-keygen -R '{name}' -f {files.split()[0]}"
    )
