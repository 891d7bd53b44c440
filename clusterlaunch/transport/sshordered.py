"""A lookup's lines read back as ssh reads them, after paramiko matched the blocks.

Keywords whose lines count in their order across blocks were parsed under numbered
keys (``sendenv_000012 :VALUE``, :func:`.sshlookup._for_paramiko`): ``SendEnv``
adds every applying line's patterns in file order (``-PATTERN`` removes earlier
ones), ``SetEnv`` takes the first applying line whole, and of ``ProxyJump`` and
``ProxyCommand`` the first applying line wins. Known-hosts file lists are split as
ssh splits words (:func:`.sshinclude.ssh_words`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from clusterlaunch.core.envpolicy import glob_regex
from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport.paramikoconfig import SSHConfigDict
from clusterlaunch.transport.sshinclude import LISTS, ssh_words, words

_NUMBERED = re.compile(r"(sendenv|setenv|proxyjump|proxycommand)_(\d+)\Z")


def read_back(found: SSHConfigDict, alias: str) -> SSHConfigDict:
    """``found`` with its numbered lines as ``sendenv`` (patterns) and ``setenv``
    (``NAME=VALUE`` words), as ssh's readconf.c builds them."""
    numbered = sorted(
        (int(match[2]), match[1], key) for key in list(found) if (match := _NUMBERED.match(key))
    )
    found.update(proxies_of(found))  # type: ignore[arg-type]  # None: as paramiko gives none
    for key in LISTS:
        if key in found:  # a list, as identityfile
            found[key] = ssh_words(str(found[key])[1:])  # type: ignore[assignment]
    send: list[str] = []
    set_: list[str] | None = None
    for _, keyword, key in numbered:
        value = found.pop(key)
        if keyword.startswith("proxy"):
            continue
        said = words(str(value)[1:], f"SSH config, host {alias}")
        if keyword == "sendenv":
            for pattern in said:
                if pattern.startswith("-"):
                    removed = re.compile(glob_regex(pattern[1:]))
                    send = [kept for kept in send if not removed.fullmatch(kept)]
                elif pattern not in send:
                    send.append(pattern)
        elif set_ is None:
            set_ = _set_env(said, alias)
    if send:
        found["sendenv"] = send  # type: ignore[assignment]  # a list, as identityfile
    if set_:
        found["setenv"] = set_  # type: ignore[assignment]
    return found


def proxies_of(found: Mapping[str, Any]) -> dict[str, str | None]:
    """``ProxyJump`` and ``ProxyCommand`` from a lookup's numbered lines, in order, as ssh
    (OpenSSH 9.2's readconf.c) takes them: whichever comes first wins, where paramiko
    kept both and the client took the jump host (``ProxyCommand none`` then a
    ``Host *`` block's ``ProxyJump``: ssh connects directly). ``ProxyJump none``
    stops later jumps, not a later ProxyCommand."""
    lines = sorted(
        (int(match[2]), match[1], str(value)[1:])
        for key, value in found.items()
        if (match := _NUMBERED.match(key)) and match[1].startswith("proxy")
    )
    chosen: dict[str, str | None] = {}
    for _, keyword, value in lines:
        if keyword == "proxyjump" and value[:1] == value[-1:] == '"' and len(value) > 1:
            value = value[1:-1]  # one word, unquoted; a command is run as written:
            # paramiko cut `"ssh" -W %h:%p "bastion"` to `ssh" -W %h:%p "bastion`
        if keyword == "proxycommand" and "proxycommand" not in chosen:
            chosen[keyword] = None if value.lower() == "none" else value
        elif keyword == "proxyjump" and not chosen:
            chosen[keyword] = value
            if value.lower() != "none":
                chosen["proxycommand"] = None  # set: a later ProxyCommand is ignored
    if (chosen.get("proxyjump") or "none").lower() != "none":
        chosen.pop("proxycommand")  # (not a value: paramiko never gave one here)
    return chosen


def _set_env(said: list[str], alias: str) -> list[str]:
    """One SetEnv line's ``NAME=VALUE`` words (a name twice: the first, as ssh keeps it)."""
    kept: dict[str, str] = {}
    for word in said:
        name, equals, _ = word.partition("=")
        if not equals or not name:  # not shown: it may be a value, which may be a secret
            got = "a word without '='" if not equals else "a word with no name before '='"
            raise UsageError(f"SSH config, host {alias}: SetEnv: use NAME=VALUE; got {got}")
        kept.setdefault(name, word)
    return list(kept.values())
