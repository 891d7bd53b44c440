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

A lookup reads the config in ssh's passes (:meth:`_Blocks.lookup`). Keywords whose
lines count in their order across blocks (``SendEnv``, ``SetEnv``, ``ProxyJump`` and
``ProxyCommand``: paramiko kept one line per block, and both proxies) are parsed
each line under a numbered keyword of its own, so paramiko's matching says which
apply and the numbers give their order; :mod:`.sshordered` reads them back as ssh.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable
from typing import Any

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport import sshcanonical, sshordered, sshtokens
from clusterlaunch.transport.hostnames import host_line_matches, pattern_list_matches
from clusterlaunch.transport.paramikoconfig import SSHConfig, SSHConfigDict
from clusterlaunch.transport.sshinclude import (
    LISTS,
    split_line,
    strip_comment,
    unquoted,
)

_WILDCARDS = frozenset("*?!")  # ssh's (match.c): "[" is itself


class _Blocks(SSHConfig):
    """paramiko's matching over the blocks ``select`` gives for each pass's name."""

    def __init__(
        self,
        select: Callable[[str], list[dict[str, Any]]],
        canonical: dict[str, str],
        final_pass: bool,
    ) -> None:
        super().__init__()
        self._select = select
        self._alias = ""
        self._canonical = canonical  # name given -> canonical name: see IndexedSshConfig
        self._final_pass = final_pass  # the config has a Match final: see lookup

    def lookup(self, hostname: str, user: str | None = None) -> SSHConfigDict:
        """ssh's passes (ssh.c): the first under the name given; a second only where the
        config has a ``Match final`` or canonicalizes (:mod:`.sshcanonical`), under the
        host name the first resolved to: its ``Host`` patterns match that name, and
        ``Match final`` and ``Match canonical`` match both. paramiko always read a
        second pass under the name given: a ``Match host ADDR`` block above the
        ``HostName ADDR`` line applied where ssh's did not, and under Fedora's ``Match
        final all`` a ``Host 10.1.*`` block did not apply where ssh's did."""
        self._alias = hostname
        self._config = self._select(hostname)
        given = SSHConfigDict(user=user) if user else None  # ssh -l: set before the config
        options = self._lookup(hostname=hostname, options=given)  # type: ignore[attr-defined]
        if "hostname" in options:  # the config's, expanded as ssh does (the name given never)
            options["hostname"] = _host_name(options["hostname"], hostname)
        else:
            options["hostname"] = hostname
        if sshcanonical.enabled(options):
            host = self._canonical.get(hostname)
            if host is None:
                first = {**options, **sshordered.proxies_of(options)}
                host = self._canonical[hostname] = sshcanonical.canonical_host(first, hostname)
        elif self._final_pass:
            host = sshcanonical.resolved_host(options, hostname)
        else:
            return self._expand_variables(options, hostname)
        options["hostname"] = host
        self._config = self._select(host)
        return self._lookup(host, options, canonical=True, final=True)  # type: ignore[attr-defined]

    def _expand_variables(self, config: Any, _target: str) -> Any:
        # %n is the name given (ssh's host_arg), also after a pass under another name.
        return super()._expand_variables(config, self._alias)  # type: ignore[misc]

    def _does_match(
        self, match_list: list[Any], _target: str, canonical: bool, final: bool, options: Any
    ) -> Any:
        # paramiko looks up the local user for every block, Match or not. Its target is
        # what "originalhost" matches: in the pass after canonicalization ssh matches the
        # name given, where paramiko matched the canonical name.
        if not match_list:
            return []
        if not final and "%" in options.get("hostname", ""):
            # "Match host" matches the HostName as ssh expands it (readconf.c's
            # match_cfg_line: %h and %% only, as ssh.c will): paramiko matched it as
            # written, so "HostName %h.lan" missed "Match host n0.lan" and matched
            # "Match host %h.lan". The second pass's HostName is expanded already.
            options = {**options, "hostname": _host_name(options["hostname"], self._alias)}
        return super()._does_match(match_list, self._alias, canonical, final, options)  # type: ignore[misc]

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
        # HostName is expanded in lookup, as ssh expands it (sshtokens.host_name).
        if key in ("controlpath", "identityfile", "proxycommand", "hostname"):
            return value
        if "%" in value:
            return super()._tokenize(config, target_hostname, key, value)  # type: ignore[misc]
        if "~" in value and "~" in self._allowed_tokens(key):  # type: ignore[attr-defined]
            return value.replace("~", os.path.expanduser("~"))  # as paramiko replaces it
        return value

    def _pattern_matches(self, patterns: Any, target: str) -> bool:
        # OpenSSH's matching (match.c), not paramiko's fnmatch: "[01]" is no character
        # class, and Match host/originalhost compare lowercased names (match_hostname).
        if isinstance(patterns, list):  # a Host line's words: each as written (readconf.c)
            if not any(_WILDCARDS.intersection(p) for p in patterns):
                return target in patterns  # names (a block per host): compared, not matched
            return host_line_matches(patterns, target)
        if isinstance(patterns, HostPatterns):
            return pattern_list_matches(patterns, target.lower(), lower=True)
        return pattern_list_matches(patterns, target, lower=False)  # Match user, localuser


class HostNameRefused(UsageError):
    """A ``HostName`` ssh refuses to expand (:func:`.sshtokens.host_name`)."""

    def __init__(self, alias: str, value: str, why: str, place: str = "SSH config") -> None:
        super().__init__(f"{place}, host {alias}: HostName {value!r}: {why}")
        self.alias, self.value, self.why = alias, value, why

    def at(self, where: Callable[[str, str], str] | None) -> UsageError:
        """The same refusal naming the file:line of the ``HostName`` line, where known."""
        if where is None:
            return self
        return HostNameRefused(self.alias, self.value, self.why, where("hostname", self.value))


def _host_name(value: str, alias: str) -> str:
    expanded, why = sshtokens.host_name(value, alias)
    if why is not None:
        raise HostNameRefused(alias, value, why)
    return expanded


class HostPatterns(str):
    """A ``Match host`` or ``originalhost`` pattern list, matched in any case as ssh does
    (match.c's match_hostname lowercases both): paramiko's did not, and ``Match
    originalhost NODE0`` missed node0."""


class IndexedSshConfig(SSHConfig):
    """``paramiko.SSHConfig`` whose :meth:`lookup` skips blocks of other literal host names."""

    def __init__(self) -> None:
        super().__init__()
        self._literal: dict[str, list[int]] | None = None
        self._always: list[int] = []
        self._plain = False
        self._final_pass = False
        # Each name's canonical name, asked of the DNS once (as one ssh asks once): the
        # paramiko client's check looks every host up again, which asked again, one
        # host after another.
        self._canonical: dict[str, str] = {}

    def parse(self, file_obj: Iterable[str]) -> None:
        """paramiko's parse, each SendEnv/SetEnv line under a numbered keyword of its own,
        and ``Match host``/``originalhost`` patterns marked to match in any case."""
        super().parse(_for_paramiko(file_obj))
        for block in self._config:  # type: ignore[attr-defined]
            for criterion in block.get("matches", ()):
                if criterion["type"] in ("host", "originalhost"):
                    criterion["param"] = HostPatterns(criterion["param"])

    def lookup(self, hostname: str, user: str | None = None) -> SSHConfigDict:
        """The options for ``hostname`` as paramiko's lookup gives them (ControlPath
        unexpanded; SendEnv and SetEnv as ssh reads them); ``user``: given as ssh's
        ``-l`` gives it (it wins, and ``Match user`` sees it)."""
        if self._literal is None:
            self._index(self._config)  # type: ignore[attr-defined]
        found = _Blocks(self._applicable, self._canonical, self._final_pass).lookup(hostname, user)
        return sshordered.read_back(found, hostname)

    def _applicable(self, name: str) -> list[dict[str, Any]]:
        """The blocks that can apply to ``name``, in file order (all of them where
        canonicalized names may differ from the one asked for)."""
        blocks: list[dict[str, Any]] = self._config  # type: ignore[attr-defined]
        if self._plain:
            return blocks
        assert self._literal is not None
        return [blocks[i] for i in heapq.merge(self._literal.get(name, ()), self._always)]

    def _index(self, blocks: list[dict[str, Any]]) -> None:
        # Built aside and published with ``_literal`` last: one parsed config is shared
        # (``sshconfig.read_ssh_config``), and two threads may index it at once.
        literal: dict[str, list[int]] = {}
        always: list[int] = []
        plain = final = False
        for index, block in enumerate(blocks):
            if "canonicalizehostname" in block["config"]:
                plain = True  # a second pass under another name: no shortcuts
            if any(c["type"] == "final" and not c["negate"] for c in block.get("matches", ())):
                final = True  # ssh reads twice (readconf.c: want_final_pass)
            patterns = block.get("host")
            if patterns and not any(_WILDCARDS.intersection(p) for p in patterns):
                for name in dict.fromkeys(patterns):
                    literal.setdefault(name, []).append(index)
            else:
                always.append(index)
        self._always, self._plain, self._final_pass = always, plain, final
        self._literal = literal


_IN_ORDER = ("sendenv", "setenv", "proxyjump", "proxycommand")
"""Keywords read in their lines' order across blocks, each line under a numbered key."""
_SPLIT = ("sendenv", "setenv", "match", "proxy", "userknownhos", "globalknownh")
"""Lines to split (a prefix of 12 characters at most: see _for_paramiko)."""


def _for_paramiko(lines: Iterable[str]) -> Iterable[str]:
    """The config's lines as paramiko's parser takes them: ``SendEnv V`` as
    ``sendenv_N :V`` (``:`` keeps paramiko from stripping quotes that open and close
    the value), and ``Match final all`` as ``Match final``."""
    for number, line in enumerate(lines):
        line = unquoted(strip_comment(line))  # (str searches where there is nothing to do)
        # Only such lines are split: splitting all 3,072 lines of a 256-host config
        # added 1.35 ms to its 5.1 ms parse, in every command's start.
        if not line.lstrip()[:12].lower().startswith(_SPLIT):
            yield line
            continue
        keyword, value = split_line(line)
        if keyword in _IN_ORDER:
            yield f"{keyword}_{number:06d} :{value}"
        elif keyword in LISTS:
            yield f"{keyword} :{value}"  # split by ssh_words, after the lookup
        elif keyword == "match":
            yield "Match " + _criteria(value.split())
        else:
            yield line


def _criteria(said: list[str]) -> str:
    """A Match line's criteria as paramiko should read them, as ssh does: ``all`` next to
    others (``final``, ``canonical``) adds nothing, and paramiko refused the line ("Match
    does not allow 'all' mixed with anything but 'canonical'"), and with it Fedora's and
    RHEL's system file. (``host`` patterns in any case: :class:`HostPatterns`.)"""
    if len(said) > 1:
        said = [word for word in said if word.lower() != "all"]
    return " ".join(said)
