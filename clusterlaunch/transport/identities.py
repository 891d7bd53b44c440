"""Private keys read once per run, for every host's paramiko client.

paramiko's client reads its identity files anew for each connection, and for
each file tries each key type in turn (RSA, ECDSA, Ed25519), reading and
parsing the file each time: an Ed25519 key was read three times per host,
0.25 ms of the controller's CPU per host (500 rounds here) before its
handshake sent anything. Here each (file, key type, passphrase) is read once
per run, and what it gave, a key (with its certificate) or paramiko's error,
is what every later host gets. A run is one ``connect_all``: a restart that
reconnects reads the files again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import paramiko

from clusterlaunch.transport import sshoffer
from clusterlaunch.transport.sshtokens import ssh_home

if TYPE_CHECKING:
    from clusterlaunch.core.model import SshTarget

_Read = Callable[[str, Any, Any], paramiko.PKey]

DEFAULT_KEYS = ("id_rsa", "id_ecdsa", "id_ed25519", "id_dsa")
"""ssh's default identity files, in its order (``ssh -G``, OpenSSH 9.2), less the types
paramiko cannot read (``id_ecdsa_sk``, ``id_ed25519_sk``, ``id_xmss``)."""


def identity_files(target: SshTarget) -> list[str]:
    """The files whose keys ssh would offer ``target``, as ssh chooses them.

    The config's IdentityFile lines; only without any, ssh's defaults that exist,
    in the home ssh uses (sshtokens.ssh_home). paramiko's own search
    (``look_for_keys``) added ``$HOME``'s ``~/.ssh/id_*`` to configured files too,
    and found none in ssh's home where ``HOME`` pointed elsewhere; with
    ``IdentitiesOnly`` and no IdentityFile it offered no key at all, where ssh
    offers its defaults.
    """
    if target.identity_files:
        # ssh skips a file that is not there ("no such identity") and goes on to the
        # next key and the agent; paramiko's client raised FileNotFoundError, and the
        # host failed with "No such file or directory".
        return [path for path in target.identity_files if os.path.isfile(path)]
    folder = os.path.join(ssh_home(), ".ssh")
    found = (os.path.join(folder, name) for name in DEFAULT_KEYS)
    return [path for path in found if os.path.isfile(path)]


class IdentityFiles:
    """The keys read from identity files in this run, shared by every connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple[str, Any, Any], paramiko.PKey | paramiko.SSHException] = {}

    def client(self, accepted: tuple[str, ...] | None = None) -> paramiko.SSHClient:
        """A paramiko client that takes its identity files' keys from here, and logs in
        only with keys whose type ``accepted`` holds (``PubkeyAcceptedAlgorithms``:
        ssh neither offers the others, from a file or from the agent)."""
        return _Client(self, accepted)

    def key(self, filename: str, klass: Any, passphrase: Any, read: _Read) -> paramiko.PKey:
        """The key ``read(filename, klass, passphrase)`` gave the first time it was asked."""
        asked = (filename, klass, passphrase)
        with self._lock:  # one read per file, even when every host asks at once
            found = self._found.get(asked)
            if found is None:
                try:
                    found = read(filename, klass, passphrase)
                except paramiko.SSHException as exc:
                    found = exc
                self._found[asked] = found
        if isinstance(found, paramiko.SSHException):
            raise found.with_traceback(None)  # as raised the first time, for the next type
        return found


class _Client(paramiko.SSHClient):
    def __init__(self, identities: IdentityFiles, accepted: tuple[str, ...] | None) -> None:
        super().__init__()
        self._identities = identities
        self._accepted = accepted
        if accepted is not None:
            self._agent = _AcceptedAgentKeys(accepted)  # paramiko's _auth asks it, if allowed

    def _auth(self, *args: Any, **kwargs: Any) -> None:
        # paramiko says "No authentication methods available" when it had no key to
        # try: an authentication failure (and reported as one), not a network error.
        try:
            super()._auth(*args, **kwargs)  # type: ignore[misc]
        except paramiko.AuthenticationException:
            raise
        except paramiko.SSHException as exc:
            if str(exc) != "No authentication methods available":
                raise
            which = " of a type PubkeyAcceptedAlgorithms accepts" if self._accepted else ""
            raise paramiko.AuthenticationException(
                f"no key{which} to offer (IdentityFile, else ssh's default files; the agent)"
            ) from None

    def _key_from_filepath(self, filename: str, klass: Any, password: Any) -> paramiko.PKey:
        # paramiko's own step, since 2.x: one identity file (and its -cert.pub) as one type.
        read = super()._key_from_filepath  # type: ignore[misc]
        key = self._identities.key(filename, klass, password, read)
        if not sshoffer.key_accepted(self._accepted, key):  # paramiko goes on to the next
            kind = key.get_name()  # an authentication failure, if nothing else logs in
            why = f"{filename}: ssh offers no {kind} key (PubkeyAcceptedAlgorithms)"
            raise paramiko.AuthenticationException(why)
        return key


class _AcceptedAgentKeys:
    """The agent's keys of accepted types (paramiko's Agent, opened when first asked)."""

    def __init__(self, accepted: tuple[str, ...]) -> None:
        self._accepted = accepted
        self._agent: paramiko.Agent | None = None

    def get_keys(self) -> tuple[paramiko.AgentKey, ...]:
        self._agent = self._agent or paramiko.Agent()
        keys = self._agent.get_keys()
        return tuple(key for key in keys if sshoffer.key_accepted(self._accepted, key))

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
