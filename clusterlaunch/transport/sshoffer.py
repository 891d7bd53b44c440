"""What paramiko offers in the key exchange: the SSH config's ``Ciphers``, ``MACs``,
``KexAlgorithms`` and ``HostKeyAlgorithms`` as ssh reads them, and AES-GCM first where
the config names no cipher.

AES-GCM's MAC is part of the cipher: paramiko's default, aes-ctr with HMAC-SHA2,
took a fifth of the controller's CPU for 10M lines through exec (1.5-1.7 s a run;
1.2-1.5 s with GCM, loopback). OpenSSH's own client list has both (after
chacha20-poly1305, which paramiko lacks), and a server without GCM gets aes-ctr.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import paramiko

from clusterlaunch.core import sshalgorithms
from clusterlaunch.core.model import SshTarget

# keyword -> (paramiko's list of what it supports, SecurityOptions' attribute)
_LISTS = {
    "ciphers": ("_preferred_ciphers", "ciphers"),
    "macs": ("_preferred_macs", "digests"),
    "kexalgorithms": ("_preferred_kex", "kex"),
    "hostkeyalgorithms": ("_preferred_keys", "key_types"),
}


def supported(keyword: str) -> tuple[str, ...]:
    """Every algorithm paramiko has for ``keyword`` (its default order)."""
    names: tuple[str, ...] = getattr(paramiko.Transport, _LISTS[keyword][0])
    return names


def default_offer(keyword: str) -> tuple[str, ...]:
    """What paramiko offers when the config says nothing (ciphers: AES-GCM first)."""
    names = supported(keyword)
    if keyword == "ciphers":
        return tuple(sorted(names, key=lambda name: "-gcm@" not in name))
    return names


def offers(algorithms: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """For each configured (keyword, value): the algorithms to offer, in order (empty:
    paramiko supports none of them)."""
    return {
        keyword: sshalgorithms.preferred(value, supported(keyword), default_offer(keyword))
        for keyword, value in algorithms
    }


def transport_factory(target: SshTarget) -> Callable[..., paramiko.Transport]:
    """paramiko's Transport for ``target``, offering what its config asks for."""
    chosen = {"ciphers": default_offer("ciphers"), **offers(target.algorithms)}

    def make(*args: Any, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(*args, **kwargs)
        options = transport.get_security_options()
        for keyword, names in chosen.items():
            setattr(options, _LISTS[keyword][1], names)
        return transport

    return make
