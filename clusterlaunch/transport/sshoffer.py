"""What paramiko offers in the key exchange: the SSH config's ``Ciphers``, ``MACs``,
``KexAlgorithms`` and ``HostKeyAlgorithms`` as ssh reads them, ssh's own lists where it
names none (never paramiko's wider ones), and AES-GCM first where the config names no
cipher; and which keys it may log in with
(``PubkeyAcceptedAlgorithms``: :func:`key_accepted`).

AES-GCM's MAC is part of the cipher: paramiko's default, aes-ctr with HMAC-SHA2,
took a fifth of the controller's CPU for 10M lines through exec (1.5-1.7 s a run;
1.2-1.5 s with GCM, loopback). OpenSSH's own client list has both (after
chacha20-poly1305, which paramiko lacks), and a server without GCM gets aes-ctr.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import paramiko

from clusterlaunch.core import sshalgorithms
from clusterlaunch.core.errors import HostKeyError
from clusterlaunch.core.model import SshTarget

# keyword -> (paramiko's list of what it supports, SecurityOptions' attribute)
_LISTS = {
    "ciphers": ("_preferred_ciphers", "ciphers"),
    "macs": ("_preferred_macs", "digests"),
    "kexalgorithms": ("_preferred_kex", "kex"),
    "hostkeyalgorithms": ("_preferred_keys", "key_types"),
}
PUBKEYS = "pubkeyacceptedalgorithms"
_SIGNATURES = "_preferred_pubkeys"  # paramiko's, as the lists above: no stubs know it
_CERT = "-cert-v01@openssh.com"
_RSA = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")
"""The signature algorithms an RSA key (type ``ssh-rsa``) can log in with."""


def supported(keyword: str) -> tuple[str, ...]:
    """Every algorithm paramiko has for ``keyword`` (its default order)."""
    if keyword == PUBKEYS:  # paramiko signs with these keys, certificates too
        plain = (*getattr(paramiko.Transport, _SIGNATURES), "ssh-rsa")
        return (*(name + _CERT for name in plain), *plain)
    names: tuple[str, ...] = getattr(paramiko.Transport, _LISTS[keyword][0])
    return names


def default_offer(keyword: str) -> tuple[str, ...]:
    """What paramiko offers when the config says nothing: what ssh offers then, of what
    paramiko has (ciphers: AES-GCM first; keys: ssh's default, which leaves SHA-1
    ``ssh-rsa`` out)."""
    names = supported(keyword)
    ssh_offers = sshalgorithms.SSH_DEFAULTS.get(keyword)
    if ssh_offers is not None:
        names = tuple(name for name in names if sshalgorithms.also_named(name, ssh_offers))
    if keyword == "ciphers":
        return tuple(sorted(names, key=lambda name: "-gcm@" not in name))
    if keyword == PUBKEYS:
        return tuple(name for name in names if not name.startswith("ssh-rsa"))
    return names


def accepted_pubkeys(target: SshTarget) -> tuple[str, ...] | None:
    """The config's ``PubkeyAcceptedAlgorithms`` as paramiko can follow it; None: not set."""
    return offers(target.algorithms).get(PUBKEYS)


def key_accepted(accepted: tuple[str, ...] | None, key: paramiko.PKey) -> bool:
    """Whether ssh would log in with ``key`` (its certificate's type where it has one)."""
    if accepted is None:
        return True
    kind = key.public_blob.key_type if key.public_blob else key.get_name()
    cert = _CERT if kind.endswith(_CERT) else ""
    if kind.removesuffix(cert) == "ssh-rsa":
        return any(name + cert in accepted for name in _RSA)
    return kind in accepted


def offers(algorithms: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, ...]]:
    """For each configured (keyword, value): the algorithms to offer, in order (empty:
    paramiko supports none of them)."""
    return dict(_offers(algorithms))


@functools.lru_cache(maxsize=16)
def _offers(algorithms: tuple[tuple[str, str], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    # Once per config, not per host and use: Fedora's crypto policy (five lists) took
    # 0.13 ms, asked three times per host (the check, the keys, the transport).
    return tuple(
        (keyword, sshalgorithms.preferred(value, supported(keyword), default_offer(keyword)))
        for keyword, value in algorithms
    )


def _checked_start(
    transport: paramiko.Transport, target: SshTarget, host_keys: tuple[str, ...] | None
) -> Callable[..., None]:
    """``transport.start_client``, host keys as ssh takes them.

    Only the config's ``HostKeyAlgorithms`` are offered: paramiko's client puts the
    type known_hosts records first for the host in front of them (client.py), one
    the config may leave out. A server's RSA host key smaller than
    ``RequiredRSASize`` is refused before it is looked up or recorded (ssh: "Bad
    server host key: Invalid key length").
    """
    start = transport.start_client

    def start_client(*args: Any, **kwargs: Any) -> None:
        if host_keys is not None:
            options = transport.get_security_options()
            options.key_types = tuple(name for name in options.key_types if name in host_keys)
        start(*args, **kwargs)
        key = transport.get_remote_server_key()
        bits = key.get_bits()
        if key.get_name().startswith("ssh-rsa") and bits < target.required_rsa_size:
            raise HostKeyError(
                target.alias,
                f"the server's RSA host key has {bits} bits, fewer than RequiredRSASize "
                f"{target.required_rsa_size}: ssh refuses it (give the host a larger key)",
            )

    return start_client


def transport_factory(target: SshTarget) -> Callable[..., paramiko.Transport]:
    """paramiko's Transport for ``target``, offering what its config asks for."""
    defaults = {keyword: default_offer(keyword) for keyword in _LISTS}
    chosen = {**defaults, **offers(target.algorithms)}
    pubkeys = chosen.pop(PUBKEYS, None)

    def make(*args: Any, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(*args, **kwargs)
        options = transport.get_security_options()
        for keyword, names in chosen.items():
            setattr(options, _LISTS[keyword][1], names)
        if pubkeys is not None:  # an RSA key signs with the first of these the server takes
            plain = (name.removesuffix(_CERT) for name in pubkeys)
            transport._preferred_pubkeys = tuple(dict.fromkeys(plain))  # type: ignore[attr-defined]
        host_keys = chosen.get("hostkeyalgorithms")
        checked = _checked_start(transport, target, host_keys)
        transport.start_client = checked  # type: ignore[method-assign]
        return transport

    return make
