"""What the paramiko transport cannot do the way ``ssh`` does: refuse it by name.

paramiko would otherwise connect *differently* from ssh: ignore a
``CertificateFile``, try other keys than a FIDO one, skip Kerberos, record a
plain host key where only a host CA is trusted. Every such setting a host needs
is refused before anything is contacted, in one line that names the setting,
its file:line, and the fix (``--ssh-client openssh``).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import struct
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from clusterlaunch.core import sshalgorithms
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import kerberos, sshoffer, sshrefused
from clusterlaunch.transport.hostkeys import KnownHosts
from clusterlaunch.transport.identities import configured_files
from clusterlaunch.transport.sshconfig import LoadedConfig, jump_host, read_ssh_config
from clusterlaunch.transport.sshkeywords import flag, spelled
from clusterlaunch.transport.sshtokens import Connection, SshRefusesToo, ssh_path, tilde

FIX = "use --ssh-client openssh"
SSH_FIX = "ssh refuses it too: set the variable or change the SSH config"
_OPENSSH_KEY = b"openssh-key-v1\x00"


def check_paramiko_can_connect(
    targets: Sequence[SshTarget], config_path: str | None, known_hosts: KnownHosts
) -> None:
    """Raise UsageError naming the first setting paramiko cannot honour for some target."""
    remote = [target for target in targets if not target.is_local]
    if not remote:
        return
    config = read_ssh_config(config_path)
    seen = Seen()
    refused = [
        (t.alias, why) for t in remote if (why := _chain_blocker(t, config, known_hosts, seen))
    ]
    if refused:
        alias, why = refused[0]
        more = f" (and {len(refused) - 1} more host(s))" if len(refused) > 1 else ""
        fix = SSH_FIX if isinstance(why, SshRefusesToo) else FIX
        raise UsageError(f"{alias}{more}: {why}; {fix}")


class Seen:
    """What the checks of every target share, found once: key types, a Kerberos ticket."""

    def __init__(self) -> None:
        self.key_types: dict[str, str | None] = {}  # identity file -> key type
        # ProxyJump value -> its blocker: every target behind a jump host has the same
        # one, and resolving the jump host again for each made the check 4 times as
        # long (256 targets: 18 against 4.6 ms), a DNS query each where it canonicalizes.
        self.jumps: dict[str, str | None] = {}

    @cached_property
    def ticket(self) -> str | None:
        return kerberos.held_ticket()


def _chain_blocker(
    target: SshTarget, config: LoadedConfig, known_hosts: KnownHosts, seen: Seen
) -> str | None:
    """The target's blocker, or one of its jump hosts' (named as such)."""
    if config.ssh_only is None and target.proxy_jump:
        for hop in target.proxy_jump.split(","):
            if hop not in seen.jumps:
                seen.jumps[hop] = blocker(jump_host(config, hop), config, known_hosts, seen)
            why = seen.jumps[hop]
            if why is not None:
                return f"jump host {hop}: {why}"
    return blocker(target, config, known_hosts, seen)


def blocker(
    target: SshTarget,
    config: LoadedConfig,
    known_hosts: KnownHosts,
    seen: Seen | None = None,
) -> str | None:
    """Why paramiko cannot reach ``target`` as ssh would, or None.

    ``seen`` keeps what is found once for every target (key types, a ticket).
    """
    seen = Seen() if seen is None else seen
    if config.ssh_only is not None:
        return f"{config.ssh_only}: paramiko cannot evaluate it as ssh does"
    given = target.user if "user" in target.given else None  # Match user sees it, as -l
    found = config.parsed.lookup(target.alias, user=given)
    settings = sshrefused.refused(found, lambda key, value: config.where(key, target.alias, value))
    if settings is not None:
        return settings
    algorithms = sshalgorithms.configured(found)
    for keyword, names in sshoffer.offers(algorithms).items():
        if not names:
            value = dict(algorithms)[keyword]
            where = config.where(keyword, target.alias, value)
            return f"{where}: {spelled(keyword)} {value}: paramiko has none of these"
    agent = _agent_blocker(target, found, config)
    if agent is not None:
        return agent
    gssapi = _gssapi_blocker(target, found, config, seen)
    if gssapi is not None:
        return gssapi
    refused = _identity_blocker(target, found, config, seen.key_types)
    if refused is not None:
        return refused
    marker = known_hosts.unusable_marker(target)
    if marker is not None:
        what = "host certificates" if marker.kind == "@cert-authority" else "revoked keys"
        return f"{marker.where}: {marker.kind} {marker.patterns}: paramiko cannot check {what}"
    return None


_AGENT_VARIABLE = re.compile(r"\$([A-Za-z0-9_]+)")
"""``IdentityAgent $NAME``, the whole value (ssh.c, OpenSSH 9.2; readconf.c refuses
``$`` followed by any other name, and ``${NAME}`` is a path's expansion)."""


def _agent_blocker(target: SshTarget, found: Mapping[str, Any], config: LoadedConfig) -> str | None:
    """An IdentityAgent other than ``$SSH_AUTH_SOCK`` (or ``none``): paramiko's client
    asks only the agent that variable names (a laptop's 1Password or Secretive agent
    set by IdentityAgent was never asked, and other keys were offered)."""
    value = found.get("identityagent")
    if value is None or value.lower() == "none" or value == "SSH_AUTH_SOCK":
        return None
    legacy = _AGENT_VARIABLE.fullmatch(value)
    # ssh.c's "legacy" $NAME: the agent NAME names, none if unset (so does paramiko's).
    if legacy is not None and os.environ.get(legacy[1]) == os.environ.get("SSH_AUTH_SOCK"):
        return None
    connection = _connection(target)
    path, why = ssh_path(value, connection)
    if why is None and path == os.environ.get("SSH_AUTH_SOCK"):
        return None
    where = config.where("identityagent", target.alias, value)
    said = why or "paramiko asks only the agent that $SSH_AUTH_SOCK names"
    return f"{where}: IdentityAgent {value}: {said}"


def _gssapi_blocker(
    target: SshTarget, found: Mapping[str, Any], config: LoadedConfig, seen: Seen
) -> str | None:
    """GSSAPI set while a ticket is held: ssh would log in with it (see :mod:`kerberos`)."""
    for keyword in ("gssapiauthentication", "gssapikeyexchange"):
        value = str(found.get(keyword, "no"))
        if flag(value) is True and seen.ticket is not None:
            where = config.where(keyword, target.alias, value)
            return (
                f"{where}: {spelled(keyword)} {value} and {seen.ticket}: ssh would log in "
                "with Kerberos; paramiko does not do GSSAPI here"
            )
    return None


def _identity_blocker(
    target: SshTarget,
    found: Mapping[str, Any],
    config: LoadedConfig,
    kinds: dict[str, str | None],
) -> str | None:
    """An identity file paramiko cannot use, or a path it cannot name as ssh would."""
    for identity in configured_files(target):
        if identity not in kinds:
            kinds[identity] = key_type(identity)
        kind = kinds[identity]
        if kind is not None and kind.startswith("sk-"):
            where = config.where("identityfile", target.alias, identity)
            return f"{where}: IdentityFile {identity}: paramiko cannot use FIDO keys ({kind})"
    return _unexpandable_path(target, found, config)


def _unexpandable_path(
    target: SshTarget, found: Mapping[str, Any], config: LoadedConfig
) -> str | None:
    """An IdentityFile or UserKnownHostsFile path that OpenSSH versions name differently."""
    connection = _connection(target)
    lines = [("identityfile", [value]) for value in found.get("identityfile", [])]
    if found.get("userknownhostsfile"):  # one line, several paths (split by the lookup)
        lines.append(("userknownhostsfile", list(found["userknownhostsfile"])))
    for keyword, names in lines:
        for written in names:
            why = ssh_path(written, connection)[1]
            if why is not None:
                where = config.where(keyword, target.alias, " ".join(names))
                said = f"{where}: {spelled(keyword)} {written}: {why}"
                return SshRefusesToo(said) if isinstance(why, SshRefusesToo) else said
    return None


def _connection(target: SshTarget) -> Connection:
    """What ssh knows of ``target`` when it expands a path (no HostKeyAlias: refused above)."""
    return Connection(
        target.alias, target.hostname, target.port, target.user, None, target.proxy_jump
    )


def key_type(identity: str) -> str | None:
    """The key type of an identity file (from its ``.pub``, else its OpenSSH header), or None."""
    path = Path(tilde(identity))
    try:
        public = path.with_name(path.name + ".pub").read_text(errors="replace").split()
    except OSError:
        public = []
    if public:
        return public[0]
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
    try:
        blob = base64.b64decode(body)
    except (binascii.Error, ValueError):
        return None
    return _openssh_private_key_type(blob)


def _openssh_private_key_type(blob: bytes) -> str | None:
    """The first public key's type in an ``openssh-key-v1`` file (readable unencrypted)."""
    if not blob.startswith(_OPENSSH_KEY):
        return None
    offset = len(_OPENSSH_KEY)
    try:
        for _ in range(3):  # cipher name, KDF name, KDF options
            (size,) = struct.unpack_from(">I", blob, offset)
            offset += 4 + size
        offset += 4  # number of keys
        offset += 4  # length of the first public key blob
        (size,) = struct.unpack_from(">I", blob, offset)
        return blob[offset + 4 : offset + 4 + size].decode("ascii", "replace")
    except struct.error:
        return None
