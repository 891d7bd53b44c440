"""How many terminal cells text takes: for the tables and the status line (pure).

A host may be named in any script, and what a host says (a Python version, a
command in ``ps``, a problem) is shown in tables: a column padded by code
points was pushed out of line by a wide CJK character (two cells), a combining
mark or a zero-width joiner (none). The width is the one ``wcwidth(3)`` gives,
from the standard library's Unicode data (no dependency for a few lines): the
East Asian Wide and Fullwidth characters (most emoji among them) take two
cells; nonspacing and enclosing marks, format characters (zero-width space and
joiner, bidirectional marks) and the Hangul vowels and finals that join the
syllable before them take none. Control characters are never measured: text
from a host is escaped (``render.printable``) first.
"""

from __future__ import annotations

import unicodedata

_NO_CELLS = frozenset({"Mn", "Me", "Cf"})
_SOFT_HYPHEN = "\u00ad"  # Cf, but terminals show it (wcwidth: one cell)
_HANGUL_JOINING = ("\u1160", "\u11ff")  # medial vowels and finals: part of the syllable before


def columns(text: str) -> int:
    """The cells ``text`` takes on a terminal."""
    if text.isascii():  # nearly every cell: no table of Unicode to look at
        return len(text)
    return sum(_char_columns(char) for char in text)


def pad(text: str, width: int) -> str:
    """``text`` and spaces to fill ``width`` cells (``str.ljust`` counts code points)."""
    return text + " " * (width - columns(text))


def cut(text: str, room: int, ellipsis: str = "…") -> str:
    """``text`` in at most ``room`` cells, ending in ``ellipsis`` where it was cut."""
    if columns(text) <= room:
        return text
    room_left = room - columns(ellipsis)
    if room_left < 0:
        return ""
    kept, used = [], 0
    for char in text:
        used += _char_columns(char)
        if used > room_left:
            break
        kept.append(char)
    return "".join(kept) + ellipsis


def _char_columns(char: str) -> int:
    if char == _SOFT_HYPHEN:
        return 1
    if unicodedata.category(char) in _NO_CELLS or _HANGUL_JOINING[0] <= char <= _HANGUL_JOINING[1]:
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
