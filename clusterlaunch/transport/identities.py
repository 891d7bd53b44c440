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

from clusterlaunch.core.errors import HostKeyError
from clusterlaunch.transport import sshauth, sshoffer
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
    if target.identity_files:  # "none" among them too: it keeps the defaults out
        # ssh skips a file that is not there ("no such identity") and goes on to the
        # next key and the agent; paramiko's client raised FileNotFoundError, and the
        # host failed with "No such file or directory". A ".pub" alone names an agent's
        # key (under IdentitiesOnly, the one it may offer), as in ssh.
        files = configured_files(target)
        return [path for path in files if any(os.path.isfile(p) for p in (path, path + ".pub"))]
    folder = os.path.join(ssh_home(), ".ssh")
    found = (os.path.join(folder, name) for name in DEFAULT_KEYS)
    return [path for path in found if os.path.isfile(path)]


def configured_files(target: SshTarget) -> list[str]:
    """The config's IdentityFile paths; ``none`` names no file (ssh.c skips the word)."""
    return [path for path in target.identity_files if path.lower() != "none"]


class IdentityFiles:
    """The keys read from identity files in this run, shared by every connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[tuple[str, Any, Any], paramiko.PKey | paramiko.SSHException] = {}

    def client(self, target: SshTarget) -> paramiko.SSHClient:
        """A paramiko client for ``target`` that takes its identity files' keys from here
        and offers keys as ssh does (:mod:`clusterlaunch.transport.sshauth`): only those
        of the types ``PubkeyAcceptedAlgorithms`` accepts, no RSA key smaller than
        ``RequiredRSASize``, with ``IdentitiesOnly`` only the agent's keys that a
        configured file names."""
        return _Client(self, target)

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
    def __init__(self, identities: IdentityFiles, target: SshTarget) -> None:
        super().__init__()
        self._alias = target.alias
        self._identities = identities
        self._accepted = sshauth.Accepted(
            sshoffer.accepted_pubkeys(target), target.required_rsa_size
        )
        self._identities_only = target.identities_only

    def connect(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().connect(*args, **kwargs)
        except Exception as exc:
            # paramiko raises a bare Exception ("TODO: REPLACEME ...") when known_hosts
            # records an RSA key first for the host and HostKeyAlgorithms has no RSA
            # algorithm: it cannot choose the host key as ssh would. One line, not a
            # traceback.
            if "what even is this key type" not in str(exc):
                raise
            raise HostKeyError(
                self._alias,
                "known_hosts records an RSA key for it first and HostKeyAlgorithms names no "
                "RSA algorithm: paramiko cannot choose the host key as ssh does; use "
                "--ssh-client openssh",
            ) from None

    def _auth(
        self,
        username: str,
        password: Any,
        pkey: Any,
        key_filenames: list[str] | None,
        allow_agent: bool,
        *rest: Any,
    ) -> None:
        """ssh's order and choice of keys (:mod:`clusterlaunch.transport.sshauth`), in
        place of paramiko's (its files, then its agent, then ``~/.ssh``: not ssh's)."""
        files = list(key_filenames or [])
        agent_keys: list[paramiko.PKey] = []
        if allow_agent:
            # None running: no keys. paramiko's close() closes it (as its own _auth's).
            self._agent = agent = paramiko.Agent()
            agent_keys = list(agent.get_keys())
        # Read only where the agent has keys to match them with (per host: not free).
        blobs = {name: sshauth.public_blob(name, self._load) for name in files if agent_keys}
        candidates = sshauth.ordered(agent_keys, files, blobs, self._identities_only)
        transport = self.get_transport()
        assert transport is not None  # connect() calls _auth on its transport
        sshauth.authenticate(transport, username, candidates, self._load, self._accepted)

    def _load(self, filename: str) -> paramiko.PKey:
        """An identity file's key, as paramiko reads one: each key type in turn."""
        if not os.path.isfile(filename):  # its .pub alone: usable only through the agent
            raise paramiko.SSHException(f"{filename}: no such file (only its .pub)")
        failure = paramiko.SSHException(f"{filename}: not a key paramiko reads")
        for klass in (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key):
            try:
                return self._key_from_filepath(filename, klass, None)
            except paramiko.SSHException as exc:
                failure = exc
        raise failure

    def _key_from_filepath(self, filename: str, klass: Any, password: Any) -> paramiko.PKey:
        # paramiko's own step, since 2.x: one identity file (and its -cert.pub) as one type.
        read = super()._key_from_filepath  # type: ignore[misc]
        return self._identities.key(filename, klass, password, read)
