"""The names ssh looks hosts up by in known_hosts, and ssh's patterns (match.c).

Pure (no paramiko): the lowercased host name, ``[host]:port`` off port 22, and
ssh's pattern lists (``*``/``?`` wildcards, ``!`` negation, hashed ``|1|``
names), as OpenSSH's ``match_hostname`` reads them; the same patterns for the
SSH config's ``Host`` and ``Match`` lines (:mod:`.sshlookup`). Nothing else is
special: ``[`` is itself (``Host node[01]`` names the host ``node[01]``), where
Python's ``fnmatch`` read a character class.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re

from clusterlaunch.core.model import SshTarget


def ssh_host_name(target: SshTarget) -> str:
    """The host name as ssh uses it: lowercased (``HostName MiXeD.Example`` is checked
    and recorded in known_hosts as ``mixed.example``, and is ``%h``)."""
    return target.hostname.lower()


def known_hosts_name(target: SshTarget) -> str:
    """The name ssh looks a host up by in known_hosts (``[host]:port`` off port 22)."""
    host = ssh_host_name(target)
    return host if target.port == 22 else f"[{host}]:{target.port}"


def host_matches(patterns: str, name: str) -> bool:
    """ssh's known_hosts pattern list: ``*``/``?`` wildcards, ``!`` negation, hashed ``|1|``."""
    return pattern_list_matches(patterns, name.lower(), lower=True, hashed=True)


def host_line_matches(patterns: list[str], target: str) -> bool:
    """A ``Host`` line: a word matching ``target`` applies the block, a ``!word`` skips it."""
    matched = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if pattern_matches(target, pattern[1:] if negated else pattern):
            if negated:
                return False
            matched = True
    return matched


def pattern_list_matches(patterns: str, name: str, lower: bool, hashed: bool = False) -> bool:
    """OpenSSH's ``match_pattern_list``: comma-separated patterns, any of which matches,
    unless a matching one starts with ``!``; ``lower``: the patterns lowercased first
    (``match_hostname``, whose caller lowercases ``name``); ``hashed``: ``|1|`` names."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if hashed and pattern.startswith("|1|"):
            hit = _hashed_name_matches(pattern, name)
        else:
            hit = pattern_matches(name, pattern.lower() if lower else pattern)
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def pattern_matches(name: str, pattern: str) -> bool:
    """OpenSSH's ``match_pattern``: ``*`` any run of characters, ``?`` any one, every
    other character itself, in its case."""
    if "*" not in pattern and "?" not in pattern:
        # A name: compared, not compiled (a pattern per line overflowed re's cache:
        # 1,024 lookups in a 1,024-line known_hosts took 42-48 ms, now 18-20 ms).
        return pattern == name
    wildcard = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(wildcard, name, re.DOTALL) is not None


def _hashed_name_matches(pattern: str, name: str) -> bool:
    """``|1|salt|hash``: HMAC-SHA1 of the name under the salt (ssh's HashKnownHosts)."""
    try:
        salt, digest = (base64.b64decode(part) for part in pattern[3:].split("|", 1))
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def is_pattern_list(patterns: str) -> bool:
    """Whether a known_hosts line's names hold a wildcard or a negation."""
    return any(name.startswith("!") or "*" in name or "?" in name for name in patterns.split(","))
