"""MPI/DeepSpeed hostfiles (``gpu01 slots=8``): told apart from YAML, read as their own format.

Every error names the file, the line and the token (``t.txt:3: expected
slots=N, got 'slots 8'``), never a YAML message about line 1. Host names are
expanded and checked by :mod:`clusterlaunch.core.hostfile`, as YAML ones are.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Collection
from dataclasses import dataclass

from clusterlaunch.core import hostfields, hostnames
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostranges import group_operand
from clusterlaunch.core.limits import MAX_PROCS_PER_HOST, MAX_WORLD_SIZE

BOM = "\ufeff"
OPTIONS = ("slots", "max_slots")
LINE_FORM = "a hostfile line reads HOST [slots=N] [max_slots=N]"
# What only a YAML file starts with: a document marker, a flow collection, a
# list item, a quoted key, or "key:" followed by a space or the line's end. A
# hostfile line never does ("gpu1:4" and "fe80::1" have no space after ':').
_YAML_START = re.compile(r"(---|%|[{\[\"']|-(\s|$)|[^\s:#]+\s*:(\s|$))")
_HOROVOD = re.compile(r"([^\s:]+):([0-9]+)")  # node0:2, node[0-1]:2
# A YAML line without the space after "key:" (master_port:29500, - host:a): the KEY
# group is checked against the hosts file's keys; VALUE has no blank.
_NO_SPACE = re.compile(r"[ \t]*(?:-[ \t]+)?([A-Za-z_]+):([^\s:][^\s]*)[ \t]*")
# What separates words in Open MPI's hostfile lexer (WHITE [\f\t\v ]); anything else
# unprintable stays in its word, and the host name rules refuse it.
_BLANKS = " \t\f\v"
_WORDS = re.compile(f"[{_BLANKS}]+")


@dataclass(frozen=True)
class MpiEntry:
    """One meaningful line: the host expression as written, its slots, its line number."""

    name: str
    slots: int
    line: int


def without_bom(text: str) -> str:
    """``text`` without a leading UTF-8 byte order mark (Windows editors write one)."""
    return text[1:] if text.startswith(BOM) else text


def looks_like_yaml(text: str) -> bool:
    """True unless the first meaningful line reads like a hostfile line (an empty file: YAML)."""
    for raw in file_lines(text):
        line = strip_comment(raw)
        if line:
            return bool(_YAML_START.match(line))
    return True


def file_lines(text: str) -> list[str]:
    """The lines of ``text`` as Open MPI's lexer reads them: each ends at ``\\n`` only
    (``str.splitlines`` also ends one at ``\\x1c`` or U+2028: one line, two hosts);
    the ``\\r`` of a CRLF file goes, as DeepSpeed's Python reading drops it."""
    return [line.removesuffix("\r") for line in without_bom(text).split("\n")]


def strip_comment(line: str) -> str:
    """The line without its ``#`` comment and surrounding blanks."""
    return line.split("#", 1)[0].strip(_BLANKS)


def parse_lines(text: str, path: str) -> list[MpiEntry]:
    """Every meaningful line of hostfile ``text`` (``path`` is for messages only)."""
    entries = []
    for number, raw in enumerate(file_lines(text), start=1):
        line = strip_comment(raw)
        if line:
            name, *words = _WORDS.split(line)
            _check_name(name, path, number)
            entries.append(MpiEntry(name, _slots(words, path, number), number))
    return entries


def _check_name(name: str, path: str, line: int) -> None:
    if "@" in name and group_operand(name) is None:  # a @group: expand_hosts says so
        user, _, bare = name.rpartition("@")
        raise HostsFileError(
            path,
            line,
            "",
            f"{hostnames.shown(name)} has a user in it, which a hostfile cannot hold; "
            f"write {hostnames.shown(bare)} here and set the user in your SSH config "
            f"(Host {bare} / User {user}), or use a YAML hosts file (user: {user})",
        )
    horovod = _HOROVOD.fullmatch(name)
    if horovod and not _is_ip(name):
        host, slots = horovod.groups()
        raise HostsFileError(path, line, "", _colon_fix(name, host, slots))
    if ":" in name and "[" not in name and not _is_ip(name):  # a range: checked expanded
        raise HostsFileError(
            path,
            line,
            "",
            f"{hostnames.shown(name)} is no host name (a ':' outside an IPv6 address); this "
            f"file is read as an MPI hostfile (its first line reads like one), and {LINE_FORM}",
        )


def refuse_missing_space(text: str, path: str, keys: Collection[str]) -> None:
    """Raise for the first line that reads ``KEY:VALUE``, a hosts-file key without the
    space YAML needs after its ``:`` (``master_port:29500``), if there is one.

    Such a line made a YAML file an MPI hostfile (``master_port:auto`` first) or a YAML
    error somewhere after it; the space is the fix, not the message that came first.
    """
    for number, raw in enumerate(file_lines(text), start=1):
        found = _NO_SPACE.fullmatch(raw.removesuffix("\r"))
        if found and found[1] in keys:
            key, value = found.groups()
            raise HostsFileError(
                path,
                number,
                "",
                f"{hostnames.shown(found[0].strip())}: YAML needs a space after the ':' "
                f"of a key; write {key}: {value}",
            )


def _colon_fix(name: str, host: str, number: str) -> str:
    """``HOST:N``: Horovod's slots, or past the slots limit a port, which no hostfile holds."""
    if len(number) <= 4 and int(number) <= MAX_PROCS_PER_HOST:  # 5,000 digits: no int()
        return f"{hostnames.shown(name)} is Horovod's HOST:SLOTS form; write {host} slots={number}"
    return (
        f"{hostnames.shown(name)}: {number} is past the {MAX_PROCS_PER_HOST:,} slots a host "
        f"may have, so a port, which a hostfile cannot hold; write {host} here and set the "
        f"port in your SSH config (Host {host} / Port {number}), or use a YAML hosts file "
        f"(host: {host}, port: {number})"
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _slots(words: list[str], path: str, line: int) -> int:
    options: dict[str, int] = {}
    for index, word in enumerate(words):
        key, equals, value = word.partition("=")
        if not equals or not key or not value:
            raise HostsFileError(path, line, "", _malformed(words, index))
        if key not in OPTIONS:
            close = difflib.get_close_matches(key, OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HostsFileError(
                path, line, "", f"unknown option {hostnames.shown(key)}{hint}; {LINE_FORM}"
            )
        if key in options:
            raise HostsFileError(path, line, "", f"{key}= is given twice; keep one")
        most = MAX_PROCS_PER_HOST if key == "slots" else MAX_WORLD_SIZE  # max_slots: ignored
        options[key] = hostfields.positive_int(value, path, line, key, most)
    return options.get("slots", 1)  # Open MPI's default when a line gives no slots


def _malformed(words: list[str], index: int) -> str:
    """``expected slots=N, got 'slots 8'``: an option's words as written, and the fix."""
    word = words[index]
    key = word.partition("=")[0]
    close = [key] if key in OPTIONS else difflib.get_close_matches(key, OPTIONS, n=1)
    if not close:
        return f"expected KEY=VALUE such as slots=N, got {word!r}; {LINE_FORM}"
    shown = words[index : index + 2]  # the value written apart: "slots 8", "slots= 8"
    if shown[-1] == "=":
        shown = words[index : index + 3]  # "slots = 8"
    return f"expected {close[0]}=N, got {' '.join(shown)!r}"
