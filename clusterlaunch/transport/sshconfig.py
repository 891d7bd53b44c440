"""Resolve hosts-file destinations through an OpenSSH client config.

Gives the planner plain :class:`~clusterlaunch.core.model.SshTarget` data, so the
planner never sees paramiko, and the master address can be the ``HostName``
peers can reach instead of an alias only the controller's config knows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import paramiko

from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import LOCALHOST, HostSpec, SshTarget

DEFAULT_SSH_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")


def load_ssh_config(path: str | None) -> paramiko.SSHConfig:
    """Parse the SSH config at ``path`` (the default file may be absent; a named one may not)."""
    chosen = os.path.expanduser(path or DEFAULT_SSH_CONFIG)
    if not os.path.exists(chosen):
        if path is not None and path != DEFAULT_SSH_CONFIG:
            raise UsageError(f"--ssh-config {path}: no such file; pass an existing SSH config")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(chosen)
    except (OSError, paramiko.SSHException, ValueError) as exc:
        raise UsageError(f"{chosen}: cannot parse the SSH config: {exc}") from None


def resolve_target(config: paramiko.SSHConfig, spec: HostSpec) -> SshTarget:
    """Combine a hosts-file entry with its SSH config block.

    Like OpenSSH's ``-l``/``-p``, ``user`` and ``port`` from the hosts file win
    over the config.
    """
    if spec.host == LOCALHOST:
        return SshTarget(alias=LOCALHOST, hostname=LOCALHOST, port=0, user=spec.user)
    found = config.lookup(spec.host)
    return SshTarget(
        alias=spec.host,
        hostname=found.get("hostname", spec.host),
        port=spec.port or _config_number(found, spec.host, "port", 22, limits.SSH_PORT),
        user=spec.user or found.get("user"),
        identity_files=tuple(_expand_paths(found.get("identityfile", []))),
        identities_only=str(found.get("identitiesonly", "no")).lower() == "yes",
        known_hosts_files=tuple(_known_hosts(found.get("userknownhostsfile"))),
        proxy_jump=_proxy_jump(found.get("proxyjump")),
        proxy_command=_none_is_none(found.get("proxycommand")),
        connect_timeout=_config_number(
            found, spec.host, "connecttimeout", None, limits.CONNECT_TIMEOUT
        ),
        host_key_checking=_none_is_none(found.get("stricthostkeychecking")),
    )


def resolve_targets(config_path: str | None, specs: Iterable[HostSpec]) -> list[SshTarget]:
    """Resolve every host of an inventory through one SSH config."""
    config = load_ssh_config(config_path)
    return [resolve_target(config, spec) for spec in specs]


def jump_host(config: paramiko.SSHConfig, jump: str) -> SshTarget:
    """Resolve a ``ProxyJump`` value (``[user@]host[:port]``) through the same config."""
    user, _, rest = jump.rpartition("@")
    host, _, port = rest.partition(":")
    spec = HostSpec(host=host, gpus=1, user=user or None, port=int(port) if port else None)
    return resolve_target(config, spec)


def _config_number(
    found: paramiko.SSHConfigDict, alias: str, key: str, default: float | None, kind: limits.Number
) -> Any:
    """A number from the SSH config, in the range the command line allows (int("abc") was a
    traceback, ConnectTimeout nan a hang)."""
    text = found.get(key)
    if text is None:
        return default
    try:
        return kind(str(text).strip())
    except UsageError:
        raise UsageError(
            f"SSH config, host {alias}: {key} {limits.shown(str(text))}: use {kind.allowed}"
        ) from None


def _expand_paths(paths: Iterable[str]) -> list[str]:
    return [os.path.expanduser(p) for p in paths]


def _known_hosts(value: str | None) -> list[str]:
    # UserKnownHostsFile may list several files separated by spaces.
    names = value.split() if value else list(DEFAULT_KNOWN_HOSTS)
    return [str(Path(os.path.expanduser(n))) for n in names]


def _none_is_none(value: str | None) -> str | None:
    return None if value is None or value.lower() == "none" else value


def _proxy_jump(value: str | None) -> str | None:
    if not value or value.lower() == "none":
        return None
    # Several comma-separated hops are kept as written; the transport chains them.
    return ",".join(hop.strip() for hop in value.split(","))
