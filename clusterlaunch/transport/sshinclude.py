"""``Include`` in an OpenSSH client config, expanded as ssh_config(5) says.

paramiko's parser ignores ``Include`` (paramiko#1609), so a host defined in an
included file was planned with the alias as its address while rsync's ``ssh -F``
found the real one. Here the config is flattened into one text that paramiko
parses the way ``ssh`` reads the files, and every line remembers the file and
line it came from, for error messages.

The rules followed (OpenSSH readconf.c): each argument is a glob, expanded in
lexical order; a relative path means ``~/.ssh/<path>`` in a user config (``-F``
files are user configs too) and ``/etc/ssh/<path>`` in the system one; a pattern
that matches nothing is skipped; an Include inside a ``Host``/``Match`` block
only applies where that block does (its own ``Host``/``Match`` lines are
combined with the enclosing condition); after the included files, the including
file continues in the block it was in; nesting deeper than 16 levels is an error
(as in ssh).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
from dataclasses import dataclass

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport.sshlines import config_lines

MAX_DEPTH = 16
"""OpenSSH's READCONF_MAX_DEPTH: an Include cycle ends here instead of looping."""
USER_DIR = "~/.ssh"
SYSTEM_DIR = "/etc/ssh"
"""Where a relative ``Include`` path is, in a user config and in the system one."""


@dataclass(frozen=True)
class ConfigLine:
    """One line of the flattened config and where it was written."""

    path: str
    lineno: int
    keyword: str
    """Lower case; ``""`` for blank and comment lines."""
    value: str
    text: str
    """What paramiko parses (a rewritten header for Host/Match lines inside an Include)."""

    @property
    def where(self) -> str:
        """``file:line``, for messages."""
        return f"{self.path}:{self.lineno}"


_COMMANDS = ("proxycommand", "localcommand", "remotecommand", "knownhostscommand")
"""Keywords whose value is the rest of the line as written, ``#`` and all (readconf.c)."""
_KEYWORD = re.compile(r"[ \t]*([^ \t=]*)[ \t]*=?")
"""A line's keyword and what separates it from the value (readconf.c's strdelim)."""


def strip_comment(text: str) -> str:
    """``text`` without its trailing comment: from a ``#`` that starts a word outside
    quotes, as ssh splits a line (argv_split; ``User alice # me`` is alice, ``Host a#b``
    is a#b). paramiko kept the comment: ``Host n1 # was n0`` matched n0 too, and ``User
    alice # me`` logged in as "alice # me". A command keeps its ``#`` (ssh runs it)."""
    if "#" not in text:
        return text
    head = _KEYWORD.match(text)
    assert head is not None  # the pattern matches any text
    if not head[1] or head[1].startswith("#") or head[1].lower() in _COMMANDS:
        return text
    quote, escaped, word_starts = "", False, True
    for index in range(head.end(), len(text)):
        char, between = text[index], False
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#" and word_starts:
            return text[:index].rstrip()
        else:
            between = char in " \t"
        word_starts = between
    return text


LISTS = ("userknownhostsfile", "globalknownhostsfile")
"""Keywords of several file names, split by their reader (:func:`ssh_words`): paramiko
took ``"/a" "b c"`` as one name (``/a" "b c``), a path with a space as two."""
_SEVERAL = frozenset(
    {"host", "match", "include", "sendenv", "setenv", "canonicaldomains", "localforward"}
    | {"remoteforward", "permitremoteopen", "channeltimeout", "ignoreunknown", "logverbose"}
    | {"canonicalizepermittedcnames", *_COMMANDS, *LISTS}
)
"""Keywords whose value is not one word (left as written by :func:`unquoted`)."""


def ssh_words(text: str) -> list[str]:
    """``text`` split as ssh splits a config line's arguments (misc.c's argv_split): quotes
    group and are removed; a backslash escapes a quote, a backslash, or a space outside
    quotes, and stays before anything else."""
    words: list[str] = []
    word: list[str] | None = None
    quote, index = "", 0
    while index < len(text):
        char, after = text[index], text[index + 1 : index + 2]
        index += 1
        if char == "\\" and after and (after in "'\"\\" or (after == " " and not quote)):
            char, index = after, index + 1
        elif not quote and char in " \t":
            if word is not None:
                words.append("".join(word))
            word = None
            continue
        elif char in "'\"" and quote in ("", char):
            quote = "" if quote else char
            word = word if word is not None else []
            continue
        word = (word if word is not None else []) + [char]
    return words if word is None else [*words, "".join(word)]


def unquoted(line: str) -> str:
    """A line of one argument as ssh reads it, written as paramiko reads it: ``User
    'alice'`` logged in as "'alice'", and ``HostName "10.0.0.1"x`` was a name to resolve."""
    if "'" not in line and '"' not in line and "\\" not in line:
        return line
    keyword, value = split_line(line)
    if not keyword or keyword in _SEVERAL:
        return line
    words = ssh_words(value)
    if len(words) != 1 or '"' in words[0]:
        return line  # ssh refuses extra arguments; paramiko's reading is left to the checks
    return (
        f'{keyword} "{words[0]}"'
        if " " in words[0] or "\t" in words[0]
        else f"{keyword} {words[0]}"
    )


def split_line(text: str) -> tuple[str, str]:
    """(keyword in lower case, value) of a config line; ``("", "")`` for blanks and comments."""
    stripped = strip_comment(text).strip()
    if not stripped or stripped.startswith("#"):
        return "", ""
    head = stripped.replace("=", " ", 1) if "=" in stripped.split(None, 1)[0] else stripped
    parts = head.split(None, 1)
    keyword = parts[0].lower()
    value = parts[1].strip() if len(parts) > 1 else ""
    if value.startswith("="):
        value = value[1:].strip()
    return keyword, value


def read_text(path: str, checked: bool = False) -> str:
    """The text of one config file (UsageError naming it when it cannot be read);
    ``checked``: refused if another user may write it (:func:`check_owner`)."""
    if checked:
        check_owner(path)
    try:
        with open(path, encoding="utf-8", newline="") as handle:  # a lone \r is no break
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the SSH config: {exc}") from None


def check_owner(path: str) -> None:
    """Refuse a config another user could write, as ssh does for ``~/.ssh/config`` and for
    every included file (readconf.c ``SSHCONF_CHECKPERM``: owned by root or the user,
    writable by neither group nor others; ``ssh -G``: "Bad owner or permissions on ...").
    Such a file could give this user's connections another user's ProxyCommand."""
    try:
        found = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the SSH config: {exc}") from None
    if found.st_uid not in (0, os.getuid()) or found.st_mode & 0o022:
        raise UsageError(
            f"{path}: bad owner or permissions: others may write it, and ssh refuses it; "
            f"make it yours and chmod go-w {path}"
        )


def may_include(text: str) -> bool:
    """Whether ``text`` may hold an ``Include`` (any "include", in any case: a comment too)."""
    return "include" in text.lower()


def flatten(path: str, system: bool = False) -> list[ConfigLine]:
    """Every line of the config at ``path``, with its Includes expanded in place.

    ``system``: ``path`` is the system-wide config, whose relative Includes are
    under /etc/ssh (SSHDIR in ssh's readconf.c), not ``~/.ssh``.
    """
    return _Flattener(SYSTEM_DIR if system else USER_DIR).read(path, (), 0)


def words(value: str, where: str) -> list[str]:
    """A value split as ssh splits arguments (quotes kept together, ``#`` ends the line)."""
    try:
        return shlex.split(value, comments=True)
    except ValueError as exc:
        raise UsageError(f"{where}: cannot split {value!r}: {exc}") from None


class _Flattener:
    def __init__(self, relative_to: str) -> None:
        self.lines: list[ConfigLine] = []
        self.relative_to = relative_to

    def read(self, path: str, outer: tuple[str, ...], depth: int) -> list[ConfigLine]:
        """Append ``path``'s lines under the condition ``outer`` (Match criteria, or none)."""
        texts = config_lines(read_text(path, checked=depth > 0), path)  # checked: included
        header: ConfigLine | None = None  # the block the next lines belong to
        for lineno, text in enumerate(texts, start=1):
            keyword, value = split_line(text)
            line = ConfigLine(path, lineno, keyword, value, text)
            if keyword in ("host", "match"):
                line = self._header(line, outer)
                header = line
                self.lines.append(line)
            elif keyword == "include":
                self._include(line, outer if header is None else _criteria(header), depth)
                # ssh restores the including file's block after the included files.
                self.lines.append(self._reopen(line, header, outer))
            else:
                self.lines.append(line)
        return self.lines

    def _include(self, line: ConfigLine, condition: tuple[str, ...], depth: int) -> None:
        if depth + 1 > MAX_DEPTH:
            raise UsageError(
                f"{line.where}: Include nested more than {MAX_DEPTH} levels deep "
                "(does a file include itself?)"
            )
        for pattern in words(line.value, line.where):
            if not os.path.isabs(pattern) and not pattern.startswith("~"):
                pattern = os.path.join(self.relative_to, pattern)
            # $HOME's ~ (glob's GLOB_TILDE in ssh too), not sshtokens.ssh_home: HOME=/x made
            # ssh -G read /x/.ssh/PATH for a relative Include (OpenSSH 9.2).
            for found in sorted(glob.glob(os.path.expanduser(pattern))):
                self.read(found, condition, depth + 1)

    def _header(self, line: ConfigLine, outer: tuple[str, ...]) -> ConfigLine:
        """A Host/Match line, combined with the condition of the block that included its file."""
        if not outer:
            return line
        criteria = _merge(outer, _criteria(line))
        text = "Match " + " ".join(shlex.quote(word) for word in criteria)
        return ConfigLine(line.path, line.lineno, "match", text[6:], text)

    def _reopen(
        self, include: ConfigLine, header: ConfigLine | None, outer: tuple[str, ...]
    ) -> ConfigLine:
        if header is not None:
            text = header.text
        elif outer:
            text = "Match " + " ".join(shlex.quote(word) for word in outer)
        else:
            text = "Host *"
        keyword, value = split_line(text)
        return ConfigLine(include.path, include.lineno, keyword, value, text)


def _criteria(header: ConfigLine) -> tuple[str, ...]:
    """A Host or Match line as Match criteria (``Host a b`` is ``originalhost a,b``)."""
    found = words(header.value, header.where)
    if header.keyword == "host":
        return ("originalhost", ",".join(found)) if found else ("all",)
    return tuple(found)


def _merge(outer: tuple[str, ...], inner: tuple[str, ...]) -> tuple[str, ...]:
    """Both conditions at once; ``all`` drops out next to any other criterion."""
    pairs = [pair for pair in (*match_pairs(outer), *match_pairs(inner)) if pair != ("all",)]
    return tuple(word for pair in pairs for word in pair) or ("all",)


def match_pairs(criteria: tuple[str, ...] | list[str]) -> list[tuple[str, ...]]:
    """Match criteria as (keyword, argument) pairs; ``all``/``canonical``/``final`` stand alone."""
    pairs: list[tuple[str, ...]] = []
    rest = list(criteria)
    while rest:
        keyword = rest.pop(0)
        alone = keyword.lstrip("!").lower() in ("all", "canonical", "final") or not rest
        pairs.append((keyword,) if alone else (keyword, rest.pop(0)))
    return pairs
