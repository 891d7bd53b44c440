"""Public-key authentication in ssh's order, for the paramiko client.

ssh offers the agent's keys first, in the agent's order, using a configured
``IdentityFile``'s key through the agent where the agent holds it (with
``IdentitiesOnly``, only those agent keys), then the configured files the agent
does not hold (sshconnect2.c ``pubkey_prepare``; ``ssh -v``'s "Will attempt
key" lines, OpenSSH 9.2). paramiko's client tries the files first and then the
agent, and was given no agent under ``IdentitiesOnly``. So a passphrase-protected
IdentityFile whose key the agent holds, with ``IdentitiesOnly yes`` (the usual
cure for "Too many authentication failures"), failed where ssh logs in; and
where several keys are authorized, another key logged in than ssh's (another
``authorized_keys`` line: other options, another forced command).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import paramiko

from clusterlaunch.transport import sshoffer

Candidate = paramiko.PKey | str
"""An agent's key, or an identity file not yet read."""


@dataclass(frozen=True)
class Accepted:
    """Which keys ssh would log in with: ``PubkeyAcceptedAlgorithms`` (None: not set)
    and ``RequiredRSASize``."""

    types: tuple[str, ...] | None
    rsa_bits: int

    def refusal(self, name: str, key: paramiko.PKey) -> str | None:
        """Why ssh would not offer ``key`` (from ``name``), or None."""
        kind = key.get_name()
        if not sshoffer.key_accepted(self.types, key):
            return f"{name}: ssh offers no {kind} key (PubkeyAcceptedAlgorithms)"
        bits = (getattr(key, "inner_key", None) or key).get_bits()  # an agent's: its key's
        if kind.startswith("ssh-rsa") and 0 < bits < self.rsa_bits:  # 0: size unknown
            return f"{name}: an RSA key of {bits} bits, fewer than RequiredRSASize {self.rsa_bits}"
        return None


def ordered(
    agent_keys: Sequence[paramiko.PKey],
    files: Sequence[str],
    file_blobs: dict[str, bytes | None],
    identities_only: bool,
) -> list[Candidate]:
    """What ssh offers, in its order (``file_blobs``: each file's public key, if known)."""
    left = list(files)
    offered: list[Candidate] = []
    for key in agent_keys:
        blob = key.asbytes()
        held = next((name for name in left if file_blobs.get(name) == blob), None)
        if held is not None:
            left.remove(held)  # the file's key, signed by the agent (no passphrase asked)
            offered.append(key)
        elif not identities_only:
            offered.append(key)
    return [*offered, *left]


def public_blob(filename: str, load: Callable[[str], paramiko.PKey]) -> bytes | None:
    """An identity file's public key: its ``.pub``, else the private file if it reads
    without a passphrase (as ssh's ``sshkey_load_public``); None when neither does."""
    try:
        with open(filename + ".pub", encoding="utf-8", errors="replace") as handle:
            return base64.b64decode(handle.read().split()[1], validate=True)
    except (OSError, IndexError, binascii.Error):
        pass
    try:
        return load(filename).asbytes()
    except paramiko.SSHException:
        return None


def authenticate(
    transport: paramiko.Transport,
    username: str,
    candidates: Sequence[Candidate],
    load: Callable[[str], paramiko.PKey],
    accepted: Accepted,
) -> None:
    """Log in with the first candidate the server takes; AuthenticationException if none."""
    failure: paramiko.SSHException | None = None
    for candidate in candidates:
        name = candidate if isinstance(candidate, str) else "the agent's key"
        try:
            key = load(candidate) if isinstance(candidate, str) else candidate
            refused = accepted.refusal(name, key)
            if refused is not None:
                failure = paramiko.AuthenticationException(refused)
                continue
            if transport.auth_publickey(username, key):
                # Partly accepted: the server wants another method too (a password, a
                # code), which a batch login cannot give; ssh in BatchMode fails too.
                raise paramiko.AuthenticationException(
                    f"{name} was accepted, but the server asks for a second factor"
                )
            return
        except paramiko.SSHException as exc:  # this key failed: ssh goes on to the next
            failure = exc
    if failure is None:
        which = " of a type PubkeyAcceptedAlgorithms accepts" if accepted.types else ""
        failure = paramiko.AuthenticationException(
            f"no key{which} to offer (IdentityFile, else ssh's default files; the agent)"
        )
    raise failure
