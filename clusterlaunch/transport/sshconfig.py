"""Resolve hosts-file destinations through an OpenSSH client config.

Gives the planner plain :class:`~clusterlaunch.core.model.SshTarget` data, so the
planner never sees paramiko, and the master address can be the ``HostName``
peers can reach instead of an alias only the controller's config knows.

The files are the ones ssh reads (``--ssh-config`` alone, as ``-F``; else
``~/.ssh/config`` then /etc/ssh/ssh_config), ``Include`` expanded
(:mod:`clusterlaunch.transport.sshinclude`), so paramiko sees what the OpenSSH
client and rsync's ``ssh`` read. A
config with ``Match exec`` is resolved by ``ssh -G`` itself
(:mod:`clusterlaunch.transport.sshresolve`): only ssh runs those commands as
ssh would.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from clusterlaunch.core.defaults import FANOUT, SYSTEM_SSH_CONFIG
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import LOCALHOST, HostSpec, SshTarget
from clusterlaunch.transport import sshkeywords, sshtarget
from clusterlaunch.transport.fanout import every_result
from clusterlaunch.transport.hostnames import host_line_matches
from clusterlaunch.transport.paramikoconfig import SSHException
from clusterlaunch.transport.sshinclude import (
    ConfigLine,
    flatten,
    may_include,
    read_text,
    ssh_words,
    words,
)
from clusterlaunch.transport.sshlines import config_lines
from clusterlaunch.transport.sshlookup import HostNameRefused, IndexedSshConfig
from clusterlaunch.transport.sshonly import SshOnly, first_ssh_only
from clusterlaunch.transport.sshtokens import tilde, users_known

DEFAULT_SSH_CONFIG = "~/.ssh/config"


@dataclass(frozen=True)
class LoadedConfig:
    """What ssh reads, with Includes expanded: parsed, and line by line for messages."""

    path: str | None
    """``--ssh-config``'s file (ssh's ``-F``: the only one read); None: ssh's defaults."""
    parsed: IndexedSshConfig
    text: str = ""
    """What was parsed: the files, with their Includes expanded."""
    flattened: tuple[ConfigLine, ...] | None = None
    """The lines, when reading needed them (an Include, two files); else :attr:`lines`."""
    files: tuple[str, ...] = ()
    """The files read, in order (absent ones left out)."""

    @cached_property
    def lines(self) -> tuple[ConfigLine, ...]:
        """Every line, with the file and line it came from (for messages).

        Found only when asked for a config without Include: splitting every line
        of a 3,072-line config (256 hosts) took 8.2 ms of every command's start.
        """
        if self.flattened is not None:
            return self.flattened
        return tuple(flatten(self.files[0])) if self.files else ()

    @cached_property
    def ssh_only(self) -> SshOnly | None:
        """The first line only ssh evaluates as ssh does, and what it says (:mod:`.sshonly`).

        Found once: it is asked for every host, and a scan per host was O(hosts²).
        """
        return first_ssh_only(self.text, lambda: self.lines)

    @cached_property
    def canonicalizes(self) -> bool:
        """A line names ``CanonicalizeHostname``: a host's lookup may then ask the DNS
        (once per ``CanonicalDomains`` entry until one resolves)."""
        return "canonicalizehostname" in self.text.lower()

    @cached_property
    def unknown_keyword(self) -> ConfigLine | None:
        """The first line whose keyword no ssh knows (:mod:`.sshkeywords`), or None."""
        return sshkeywords.unknown(self.text, lambda: self.lines)

    def where(self, keyword: str, alias: str, value: str) -> str:
        """``file:line`` of the ``keyword value`` line that applies to ``alias`` (best effort).

        The first such line in a block that can apply (global, a ``Host``
        matching ``alias``, or any ``Match``), as ssh takes the first value.
        """
        header: ConfigLine | None = None
        fallback = None
        for line in self.lines:
            if line.keyword in ("host", "match"):
                header = line
            elif line.keyword == keyword and _same(line, value):
                fallback = fallback or line.where
                if header is None or header.keyword == "match" or self._hosts(header, alias):
                    return line.where
        return fallback or (self.files[0] if self.files else DEFAULT_SSH_CONFIG)

    @staticmethod
    def _hosts(header: ConfigLine, alias: str) -> bool:
        """A ``Host`` line's patterns match ``alias`` (``!pattern`` excludes)."""
        return host_line_matches(words(header.value, header.where), alias)


def _same(line: ConfigLine, value: str) -> bool:
    written = line.value.strip().strip('"')
    if written.lower() == value.lower() or tilde(written) == value:
        return True
    return " ".join(ssh_words(line.value)) == value  # quoted words, as the lookup split them


def config_path(path: str | None) -> str:
    """``--ssh-config``'s file, or the one ssh reads by default: ``~/.ssh/config`` under
    the password database's home (sshtokens.ssh_home), which ``$HOME`` does not move."""
    return os.path.expanduser(path) if path is not None else tilde(DEFAULT_SSH_CONFIG)


def read_ssh_config(path: str | None, system: str = SYSTEM_SSH_CONFIG) -> LoadedConfig:
    """What ssh reads, Includes expanded: ``path`` alone (as ``ssh -F``), else the user's
    ``~/.ssh/config`` and then ``system`` (either may be absent).

    One text: ssh takes the first value it reads, the user's file first. Sites put
    ProxyJump, GlobalKnownHostsFile and algorithms in the system file; reading only
    the user's, clusterlaunch connected differently from plain ``ssh``.
    """
    if path is not None:
        chosen = config_path(path)
        if not os.path.exists(chosen) and path != DEFAULT_SSH_CONFIG:
            raise UsageError(f"--ssh-config {path}: no such file; pass an existing SSH config")
        files = [(chosen, False)]
    else:
        files = [(config_path(None), False), (system, True)]
    files = [(name, is_system) for name, is_system in files if os.path.exists(name)]
    if not files:
        return LoadedConfig(path, IndexedSshConfig())
    # ssh checks who may write ~/.ssh/config, not an -F file nor the system one.
    first = read_text(files[0][0], checked=path is None and not files[0][1])
    lines = None
    if len(files) > 1 or may_include(first):  # the system file is read as it is flattened
        lines = tuple(_flattened(files))
        texts = [line.text for line in lines]  # each file split by config_lines there
    else:
        texts = config_lines(first, files[0][0])  # at \n only, as ssh splits them
    text = "\n".join(texts)
    try:
        parsed = _parse(text)
    except (SSHException, ValueError) as exc:
        raise UsageError(f"{files[0][0]}: cannot parse the SSH config: {exc}") from None
    return LoadedConfig(path, parsed, text, lines, tuple(name for name, _ in files))


def _flattened(files: list[tuple[str, bool]]) -> Iterable[ConfigLine]:
    """Every file's lines in turn; each after the first starts outside any block, as
    ssh reads it (its leading lines apply to every host, not to the block before)."""
    for index, (name, is_system) in enumerate(files):
        if index:
            yield ConfigLine(name, 0, "host", "*", "Host *")
        yield from flatten(name, is_system)


@functools.lru_cache(maxsize=4)
def _parse(text: str) -> IndexedSshConfig:
    """``text`` parsed, once per content (read-only after; shared).

    A launch reads its config more than once (resolving the hosts, the paramiko
    client's compatibility check, each ProxyJump chain), and parsing is most of
    a read: 11 of 11.5 ms for a 3,072-line config. Keyed by the text itself, so
    an edited file, an included one too, is parsed again.
    """
    return IndexedSshConfig.from_text(text)


def ssh_config_file(path: str | None) -> str | None:
    """The config for ``ssh -F``: ``--ssh-config``'s file; None, no ``-F``, where ssh is to
    read its own defaults (``~/.ssh/config``, then /etc/ssh/ssh_config), as plain ssh does."""
    return None if path is None else config_path(path)


def resolve_target(
    config: IndexedSshConfig, spec: HostSpec, loaded: LoadedConfig | None = None
) -> SshTarget:
    """Combine a hosts-file entry with its SSH config block (``loaded``: where its lines are).

    Like OpenSSH's ``-l``/``-p``, ``user`` and ``port`` from the hosts file win
    over the config; ``user`` is what ``Match user`` sees, as ssh's ``-l`` is.
    """
    if spec.host == LOCALHOST:
        return SshTarget(alias=LOCALHOST, hostname=LOCALHOST, port=0, user=spec.user)
    where = None if loaded is None else functools.partial(_where_for, loaded, spec.host)
    try:
        found = config.lookup(spec.host, user=spec.user)
    except HostNameRefused as refused:
        raise refused.at(where) from None
    return sshtarget.target_from(found, spec, where)


def _where_for(loaded: LoadedConfig, alias: str, keyword: str, value: str) -> str:
    return loaded.where(keyword, alias, value)


def resolve_targets(config_path: str | None, specs: Iterable[HostSpec]) -> list[SshTarget]:
    """Resolve every host of an inventory through one SSH config; one without a user where
    this uid has no name is refused (:func:`.sshtokens.users_known`), as ssh refuses it."""
    return users_known(resolve_in(read_ssh_config(config_path), list(specs)))


def resolve_in(loaded: LoadedConfig, specs: list[HostSpec]) -> list[SshTarget]:
    """``specs`` through ``loaded``: by ``ssh -G`` where only ssh resolves them as ssh
    does (:attr:`LoadedConfig.ssh_only`). A config ssh refuses is refused here."""
    _check_keywords(loaded, specs)
    if loaded.ssh_only is not None:
        from clusterlaunch.transport import sshresolve

        return sshresolve.resolve_with_ssh(loaded.path, specs, str(loaded.ssh_only))
    if loaded.canonicalizes and len(specs) > 1:
        # Every host's DNS queries at once, as one ssh per host would send them: one
        # after another, 64 hosts took 64 times the resolver's answer, or its timeout.
        return every_result(
            lambda spec: resolve_target(loaded.parsed, spec, loaded), specs, FANOUT, "resolve"
        )
    return [resolve_target(loaded.parsed, spec, loaded) for spec in specs]


def _check_keywords(loaded: LoadedConfig, specs: list[HostSpec]) -> None:
    """A keyword no ssh knows: the local ssh's verdict (:mod:`.sshkeywords`); a yes/no
    keyword's other value, or a second word where ssh takes one, in any block (ssh
    refuses the whole file for them)."""
    flagged = sshkeywords.bad_flag(loaded.text, lambda: loaded.lines)
    if flagged is not None:
        raise sshkeywords.refused_value(flagged)
    crowded = sshkeywords.extra_words(loaded.text, lambda: loaded.lines)
    if crowded is not None:
        raise sshkeywords.refused_words(crowded)
    line = loaded.unknown_keyword
    remote = [spec.host for spec in specs if spec.host != LOCALHOST]
    if line is None or not remote:
        return
    error = sshkeywords.refused(line, _ssh_refusal(loaded.path, loaded.text, remote[0]))
    if error is not None:
        raise error


@functools.lru_cache(maxsize=16)
def _ssh_refusal(path: str | None, text: str, host: str) -> str | None:
    """``ssh -G``'s verdict on a config (keyed by its ``text`` too: an edited one is asked
    again), once: the paramiko client's check resolves a jump host again for every
    target behind it (sshcompat), which asked ssh once per target."""
    from clusterlaunch.transport import sshresolve

    return sshresolve.refusal(path, host)


def jump_host(loaded: LoadedConfig, jump: str) -> SshTarget:
    """Resolve a ``ProxyJump`` hop (:func:`.sshtarget.split_hop`) through the same config,
    as its targets are (a ``Match exec`` config through paramiko was a traceback: paramiko
    cannot run the command)."""
    user, host, port = sshtarget.split_hop(jump)
    return users_known(resolve_in(loaded, [HostSpec(host=host, gpus=1, user=user, port=port)]))[0]
