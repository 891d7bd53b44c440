"""Why an OpenSSH client failed to connect, from what it printed: the same words as paramiko's.

A user switching ``--ssh-client`` should read the same sentence for the same
problem (a refused port, an unknown or changed host key, a failed login), and
the connection loop needs to know which failures are worth a retry.
"""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass

from clusterlaunch.core.errors import HostKeyError, TransportError
from clusterlaunch.core.hostport import host_port
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.hostnames import host_matches, known_hosts_name, ssh_host_name

# sshd dropped the connection before or during the key exchange: MaxStartups
# throttling a burst, a server restarting, a reset in the network.
_TRANSIENT = (
    "kex_exchange_identification",
    "Connection reset by peer",
    "Connection closed by",
    "ssh_exchange_identification",
)
_PIPE_CLOSED = "UNKNOWN port 65535"
"""How ssh names the peer of a ProxyCommand's pipe (it has no address)."""
RETRIES = 3
"""Transient handshake failures retried per host (then it is a failure like any other)."""
SUSPENDED_RETRIES = 10
"""Attempts cut short by this controller's own suspension (Ctrl-Z: paramiko's timers ran
on), tried again per host apart from :data:`RETRIES`: no fault of the server's, so they
use none of its tries, yet they stay bounded (a controller stopped again and again)."""
BACKOFF_S = 0.5
"""First retry after about this long, doubling."""
_FINGERPRINT = re.compile(r"(SHA256:[A-Za-z0-9+/=]+)")
_OFFENDING = re.compile(r"Offending \S+ key in (\S+):(\d+)")
_MARKED_REVOKED = re.compile(r"The (\S+) host key for (\S+) is marked as revoked")
_REVOKED_BY_FILE = re.compile(r"Host key (\S+ \S+) revoked by file (.+)")


@dataclass(frozen=True)
class Failure:
    """A failure that will not go away by trying again."""

    detail: str
    host_key: bool = False

    def error(self, alias: str) -> TransportError:
        """The error for host ``alias``."""
        return (HostKeyError if self.host_key else TransportError)(alias, self.detail)


@dataclass(frozen=True)
class Transient(Failure):
    """A failure during the handshake that a retry may not meet again."""


def classify(target: SshTarget, said: str, policy_override: str | None) -> Failure:
    """The failure an ssh client that exited with ``said`` on stderr stands for."""
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    last = lines[-1] if lines else "ssh exited without saying why"
    where = host_port(target.hostname, target.port)
    text = "\n".join(lines)
    if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "HOST KEY HAS CHANGED" in text:
        return Failure(_changed_key(target, text), host_key=True)
    if "REVOKED HOST KEY" in text or _REVOKED_BY_FILE.search(text):  # not "unknown": no fix
        return Failure(_revoked_key(target, text), host_key=True)
    if "Host key verification failed" in text:
        policy, origin = target.key_policy(policy_override)
        why = next((line for line in lines if "host key" in line.lower()), last).rstrip(".")
        fix = (
            "connect once with --host-key-policy accept-new"
            if policy == "strict"  # accept-new already: ssh could not record it
            else "name a known_hosts file ssh can write in UserKnownHostsFile"
        )
        return Failure(
            f"unknown host key ({origin}): {why}; add it to known_hosts (ssh-keyscan) or {fix}",
            host_key=True,
        )
    if "Connection refused" in text:
        return Failure(f"connection refused by {where} (is sshd listening on that port?)")
    if "Could not resolve hostname" in text:
        return Failure(f"cannot resolve {target.hostname!r}")
    if "banner exchange" in text:  # the server accepted, then said nothing in time:
        # final, as ssh takes it (no retry after a whole ConnectTimeout; paramikofailure)
        said_so = next(line for line in lines if "banner exchange" in line)
        return Failure(f"no SSH handshake with {where}: the server did not answer ({said_so})")
    if "timed out" in text:
        return Failure(f"no answer from {where}: {last}")
    if "Permission denied" in text:
        who = f"{target.user}@" if target.user else ""
        return Failure(f"authentication failed for {who}{target.hostname}: {last}")
    if target.proxy_command and not target.proxy_jump and _PIPE_CLOSED in text:
        return _proxy_ended(target.proxy_command, lines)
    if any(mark in text for mark in _TRANSIENT):
        return Transient(f"no SSH handshake with {where}: {last}")
    return Failure(f"{where}: {last}")


def _proxy_ended(command: str, lines: list[str]) -> Failure:
    """The ProxyCommand's output ended before a banner. Where it said why (its stderr is
    ssh's), it failed: final, as ssh runs it once; else the far side may have closed
    (sshd's MaxStartups), worth a retry. No address: ssh dialled none."""
    said = [line for line in lines if not any(mark in line for mark in _TRANSIENT)]
    if said:
        return Failure(f"ProxyCommand {command!r} ended before the SSH handshake: "
                       + " | ".join(said[-3:]))  # fmt: skip
    return Transient(f"ProxyCommand {command!r} closed the connection before the SSH handshake")


def backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` (0-based), jittered so a burst of hosts spreads out."""
    return BACKOFF_S * 2**attempt * random.uniform(0.75, 1.25)


def retry_note(alias: str, detail: str, attempt: int, delay: float) -> str:
    """The line a retried handshake leaves in controller.log (and on --verbose)."""
    return f"{alias}: {detail}; retry {attempt}/{RETRIES} in {delay:.1f} s"


class Retries:
    """One host's failed handshake attempts, counted apart by whose fault they were: the
    server's (:data:`RETRIES`, with backoff) or our own suspension's (:data:`SUSPENDED_RETRIES`,
    at once: the server is not overloaded). Four Ctrl-Zs, each during an attempt, failed a
    healthy host when they counted among the server's three."""

    def __init__(self) -> None:
        self._server = 0
        self._ours = 0

    def again(self, alias: str, detail: str, ours: bool) -> tuple[str, float] | None:
        """The note and the delay before trying once more; None: no try left of that kind."""
        if ours:
            if self._ours >= SUSPENDED_RETRIES:
                return None
            self._ours += 1
            note = f"{alias}: {detail}; retry at once ({self._ours}/{SUSPENDED_RETRIES} after "
            return note + f"a suspension of ours, none of the server's {RETRIES} used)", 0.0
        if self._server >= RETRIES:
            return None
        delay = backoff(self._server)
        self._server += 1
        return retry_note(alias, detail, self._server, delay), delay


def timed_out(target: SshTarget, timeout: float) -> str:
    """A master that neither connected nor failed in time."""
    return f"no SSH session with {host_port(target.hostname, target.port)} within {3 * timeout:g} s"


def _revoked_key(target: SshTarget, text: str) -> str:
    """ssh refused a revoked key: by a ``RevokedHostKeys`` file, which it names, or by a
    ``@revoked`` line of known_hosts (the host key's, or its certificate authority's), which
    it does not name: the lines that apply to this host are named instead."""
    by_file = _REVOKED_BY_FILE.search(text)
    if by_file:
        revoked = f"its {by_file[1]} key is revoked by the RevokedHostKeys file {by_file[2]}"
    else:
        marked = _MARKED_REVOKED.search(text)
        key = f"its {marked[1]} key" if marked else "its key"
        lines = ", ".join(_revoked_lines(target)) or "a known_hosts file"
        revoked = f"{key} is marked @revoked in {lines}"
    return (
        f"HOST KEY REVOKED: {revoked}; refusing to connect, as ssh does, and nothing was "
        "started there. A revoked key may be a stolen one: ask the host's administrator"
    )


def _revoked_lines(target: SshTarget) -> list[str]:
    """``FILE:LINE`` of each ``@revoked`` line of ``target``'s known_hosts files that
    applies to it (names it, as ssh matches names), in the order ssh reads them."""
    names = (known_hosts_name(target), ssh_host_name(target))
    found: list[str] = []
    for path in (*target.global_known_hosts_files, *target.known_hosts_files):
        try:
            with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as file:
                found += [f"{path}:{number}" for number, line in enumerate(file, 1)
                          if _revokes(line.split(), names)]  # fmt: skip
        except OSError:  # unreadable or missing: ssh skipped it too
            continue
    return found


def _revokes(fields: list[str], names: tuple[str, ...]) -> bool:
    return (
        fields[:1] == ["@revoked"]
        and len(fields) > 1
        and any(host_matches(fields[1], name) for name in names)
    )


def _changed_key(target: SshTarget, text: str) -> str:
    offered = _FINGERPRINT.search(text)
    offending = _OFFENDING.search(text)
    name = target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"
    known = f"{offending[1]}:{offending[2]}" if offending else "known_hosts"
    file = offending[1] if offending else (target.known_hosts_files or ("~/.ssh/known_hosts",))[0]
    return (
        f"HOST KEY CHANGED (known in {known}, offered {offered[1] if offered else 'another key'})"
        f"; refusing to connect. If the host was really reinstalled, remove the old key: "
        f"ssh-keygen -R '{name}' -f {file}"
    )
