"""SSH config lookups in time independent of the blocks that cannot apply.

paramiko's ``SSHConfig.lookup`` tries every block of the file for every host,
twice, and asks for the local user name (environment, then ``pwd``) before
looking at each block's criteria: a config with one ``Host`` block per host
(as generated cluster configs often are) made resolving O(hosts²). Measured on
32 hosts: 4,096 user-name look-ups and ~80 ms of the controller's CPU, before
anything was contacted; 256 hosts would be 64 times that.

Here blocks whose ``Host`` patterns are all literal names are indexed by name;
a lookup hands paramiko's own matching only the blocks that can apply (the
literal ones for that name, and every block with a wildcard, a negation or a
``Match``), in file order, so every value comes out as paramiko gives it
(``ControlPath`` excepted: never used, and left unexpanded; and ``IdentityFile``,
left as written for :mod:`clusterlaunch.transport.sshtokens` to expand as ssh
does). A config that canonicalizes host names (a second pass under another name)
is looked up the plain way.

``SendEnv`` and ``SetEnv`` come out as ssh reads them, where paramiko's parser
keeps one line per block and strips the quotes around a whole value: ssh adds
every applying SendEnv line's patterns in file order (``-PATTERN`` removes
earlier ones) and takes the first applying SetEnv line whole. Each such line is
parsed under a numbered keyword of its own, so paramiko's matching says which
apply and the numbers give their order (:func:`_environment`).
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterable
from typing import Any

from clusterlaunch.core.envpolicy import glob_regex
from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport import sshcanonical
from clusterlaunch.transport.paramikoconfig import SSHConfig, SSHConfigDict
from clusterlaunch.transport.sshinclude import split_line, strip_comment, words

_WILDCARDS = frozenset("*?[!")


class _Blocks(SSHConfig):
    """paramiko's matching over a given list of blocks."""

    def __init__(self, blocks: list[dict[str, Any]], canonical: dict[str, str]) -> None:
        super().__init__()
        self._config = blocks
        self._alias = ""
        self._canonical = canonical  # name given -> canonical name: see IndexedSshConfig

    def lookup(self, hostname: str) -> SSHConfigDict:
        """paramiko's two passes, the second under the name ssh canonicalizes to
        (:mod:`clusterlaunch.transport.sshcanonical`) where the config asks for it."""
        self._alias = hostname
        options = self._lookup(hostname=hostname)  # type: ignore[attr-defined]
        if "hostname" not in options:
            options["hostname"] = hostname
        if not sshcanonical.enabled(options):
            return self._lookup(hostname, options, canonical=False, final=True)  # type: ignore[attr-defined]
        host = self._canonical.get(hostname)
        if host is None:
            host = self._canonical[hostname] = sshcanonical.canonical_host(options, hostname)
        options["hostname"] = host
        return self._lookup(host, options, canonical=True, final=True)  # type: ignore[attr-defined]

    def _does_match(self, match_list: list[Any], _target: str, *rest: Any) -> Any:
        # paramiko looks up the local user for every block, Match or not. Its target is
        # what "originalhost" matches: in the pass after canonicalization ssh matches the
        # name given, where paramiko matched the canonical name.
        if not match_list:
            return []
        return super()._does_match(match_list, self._alias, *rest)  # type: ignore[misc]

    def _tokenize(self, config: Any, target_hostname: str, key: str, value: str) -> Any:
        # For each value it may expand, even one without a token, paramiko asks for the
        # local user (pwd), host name and, for IdentityFile and ControlPath, the DNS name
        # (socket.getfqdn: a reverse look-up): 32 hosts made 128 user, 192 host-name and
        # 64 DNS look-ups before anything was contacted. Without "%" only "~" can expand.
        # ControlPath is never used (ssh gets clusterlaunch's own; paramiko multiplexes
        # nothing), and its usual tokens (%C, %r@%h:%p) cost a DNS look-up per host.
        # IdentityFile and ProxyCommand are expanded as ssh does it, with the hosts file's
        # user and port (sshtokens): paramiko's expansion named other files than ssh's,
        # and gave ProxyCommand the config's port and user, and %n and %% as written.
        if key in ("controlpath", "identityfile", "proxycommand"):
            return value
        if "%" in value:
            return super()._tokenize(config, target_hostname, key, value)  # type: ignore[misc]
        if "~" in value and "~" in self._allowed_tokens(key):  # type: ignore[attr-defined]
            return value.replace("~", os.path.expanduser("~"))  # as paramiko replaces it
        return value

    def _pattern_matches(self, patterns: Any, target: str) -> bool:
        # fnmatch compiles a regular expression for each new pattern: one per host of a
        # config with a block per host (33 for a 32-host exec), where a name is a name.
        if isinstance(patterns, list) and not any(_WILDCARDS.intersection(p) for p in patterns):
            return target in patterns
        return bool(super()._pattern_matches(patterns, target))  # type: ignore[misc]


class IndexedSshConfig(SSHConfig):
    """``paramiko.SSHConfig`` whose :meth:`lookup` skips blocks of other literal host names."""

    def __init__(self) -> None:
        super().__init__()
        self._literal: dict[str, list[int]] | None = None
        self._always: list[int] = []
        self._plain = False
        # Each name's canonical name, asked of the DNS once (as one ssh asks once): the
        # paramiko client's check looks every host up again, which asked again, one
        # host after another.
        self._canonical: dict[str, str] = {}

    def parse(self, file_obj: Iterable[str]) -> None:
        """paramiko's parse, each SendEnv/SetEnv line under a numbered keyword of its own."""
        super().parse(_for_paramiko(file_obj))

    def lookup(self, hostname: str) -> SSHConfigDict:
        """The options for ``hostname`` as paramiko's lookup gives them (ControlPath
        unexpanded; SendEnv and SetEnv as ssh reads them)."""
        blocks: list[dict[str, Any]] = self._config  # type: ignore[attr-defined]
        if self._literal is None:
            self._index(blocks)
        if self._plain:
            return _environment(_Blocks(blocks, self._canonical).lookup(hostname), hostname)
        assert self._literal is not None
        wanted = heapq.merge(self._literal.get(hostname, ()), self._always)
        blocks = [blocks[i] for i in wanted]
        return _environment(_Blocks(blocks, self._canonical).lookup(hostname), hostname)

    def _index(self, blocks: list[dict[str, Any]]) -> None:
        # Built aside and published with ``_literal`` last: one parsed config is shared
        # (``sshconfig.read_ssh_config``), and two threads may index it at once.
        literal: dict[str, list[int]] = {}
        always: list[int] = []
        plain = False
        for index, block in enumerate(blocks):
            if "canonicalizehostname" in block["config"]:
                plain = True  # a second pass under another name: no shortcuts
            patterns = block.get("host")
            if patterns and not any(_WILDCARDS.intersection(p) for p in patterns):
                for name in dict.fromkeys(patterns):
                    literal.setdefault(name, []).append(index)
            else:
                always.append(index)
        self._always, self._plain = always, plain
        self._literal = literal


_NUMBERED = re.compile(r"(sendenv|setenv)_(\d+)\Z")


def _for_paramiko(lines: Iterable[str]) -> Iterable[str]:
    """The config's lines as paramiko's parser takes them: ``SendEnv V`` as
    ``sendenv_N :V`` (``:`` keeps paramiko from stripping quotes that open and close
    the value), and ``Match final all`` as ``Match final``."""
    for number, line in enumerate(lines):
        line = strip_comment(line)  # (a str search where the line has no "#")
        # Only such lines are split: splitting all 3,072 lines of a 256-host config
        # added 1.35 ms to its 5.1 ms parse, in every command's start.
        if not line.lstrip()[:7].lower().startswith(("sendenv", "setenv", "match")):
            yield line
            continue
        keyword, value = split_line(line)
        if keyword in ("sendenv", "setenv"):
            yield f"{keyword}_{number:06d} :{value}"
        elif keyword == "match" and _all_among_others(value):
            yield "Match " + " ".join(word for word in value.split() if word.lower() != "all")
        else:
            yield line


def _all_among_others(criteria: str) -> bool:
    """``all`` next to other Match criteria (``final``, ``canonical``): ssh allows it there
    and it adds nothing; paramiko refused the line ("Match does not allow 'all' mixed with
    anything but 'canonical'"), and with it Fedora's and RHEL's system file."""
    said = [word.lower() for word in criteria.split()]
    return len(said) > 1 and "all" in said


def _environment(found: SSHConfigDict, alias: str) -> SSHConfigDict:
    """``found`` with its numbered lines as ``sendenv`` (patterns) and ``setenv``
    (``NAME=VALUE`` words), as ssh's readconf.c builds them."""
    numbered = sorted(
        (int(match[2]), match[1], key) for key in list(found) if (match := _NUMBERED.match(key))
    )
    send: list[str] = []
    set_: list[str] | None = None
    for _, keyword, key in numbered:
        said = words(str(found.pop(key))[1:], f"SSH config, host {alias}")
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


def _set_env(said: list[str], alias: str) -> list[str]:
    """One SetEnv line's ``NAME=VALUE`` words (a name twice: the first, as ssh keeps it)."""
    kept: dict[str, str] = {}
    for word in said:
        name, equals, _ = word.partition("=")
        if not equals or not name:
            raise UsageError(f"SSH config, host {alias}: SetEnv {word}: use NAME=VALUE")
        kept.setdefault(name, word)
    return list(kept.values())
