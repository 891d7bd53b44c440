"""The config lines only ssh evaluates as ssh does: a config with one is resolved by
``ssh -G`` (:mod:`.sshresolve`), and the paramiko client refuses it, naming the line.

Three kinds: a ``Match`` criterion paramiko's matcher does not know (``exec``, and
OpenSSH 9.4's ``localnetwork``, ``tagged``, ``version``, which it took as matching
every host); ``CanonicalizePermittedCNAMEs`` (DNS aliases followed into the host
name); and lines that OpenSSH versions read differently, where only the ssh here
knows its own reading:

- ``Match !final`` made ssh read the config a second time before OpenSSH 10.1
  (its ``Host`` patterns then match the resolved host name, ``Match canonical``
  matches), and no longer does (unless a plain ``Match final`` or canonicalization
  asks for one);
- ``ProxyJump none`` under ``CanonicalizeHostname yes`` kept the host's name from
  being canonicalized before OpenSSH 9.4, as if a jump host were set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from clusterlaunch.transport.sshinclude import ConfigLine, match_pairs, words

_PARAMIKO_MATCHES = frozenset(
    ("all", "canonical", "final", "host", "originalhost", "user", "localuser")
)
"""The Match criteria paramiko's matcher evaluates as ssh does."""
NEGATED_FINAL = "Match !final (OpenSSH before 10.1 reads the config a second time for it)"
JUMP_NONE = (
    "ProxyJump none under CanonicalizeHostname yes (OpenSSH before 9.4 canonicalizes "
    "no host name then)"
)


@dataclass(frozen=True)
class SshOnly:
    """A config line only ssh evaluates as ssh does: ``what`` names it in messages."""

    line: ConfigLine
    what: str

    def __str__(self) -> str:
        return f"{self.line.where}: {self.what}"


def first_ssh_only(text: str, lines: Callable[[], Iterable[ConfigLine]]) -> SshOnly | None:
    """The first line of ``text`` (its ``lines``, asked for only where one may be) that
    only ssh evaluates as ssh does, or None."""
    lowered = text.lower()
    if "match" not in lowered and "canonicalize" not in lowered:
        return None  # no line to look at
    final = canonicalize_yes = False
    version_dependent: dict[str, tuple[int, SshOnly]] = {}  # kind -> (index, its first line)
    for index, line in enumerate(lines()):
        if line.keyword == "match":
            for pair in match_pairs(words(line.value, line.where)):
                written = pair[0].lower()
                if written.lstrip("!") not in _PARAMIKO_MATCHES:
                    return SshOnly(line, f"Match {written.lstrip('!')}")
                final = final or written == "final"
                if written == "!final":
                    version_dependent.setdefault("final", (index, SshOnly(line, NEGATED_FINAL)))
        elif line.keyword == "canonicalizepermittedcnames" and line.value.lower() != "none":
            return SshOnly(line, "CanonicalizePermittedCNAMEs")
        elif line.keyword == "canonicalizehostname":
            canonicalize_yes = canonicalize_yes or _first_word(line) in ("yes", "true")
        elif line.keyword == "proxyjump" and _first_word(line) == "none":
            version_dependent.setdefault("jump", (index, SshOnly(line, JUMP_NONE)))
    if final:  # a second pass, whichever the version: a "Match !final" changes nothing
        version_dependent.pop("final", None)
    if not canonicalize_yes:
        version_dependent.pop("jump", None)
    return min(version_dependent.values(), default=(0, None))[1]


def _first_word(line: ConfigLine) -> str:
    said = words(line.value, line.where)
    return said[0].lower() if said else ""
