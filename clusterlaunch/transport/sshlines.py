"""An SSH config's lines, split where ssh splits them: at ``\\n`` only.

ssh reads its config with ``getline`` (readconf.c), so ``\\f``, ``\\v``, ``\\x1c`` or
U+2028 in a line stay in a word: ``User alice<U+2028>Port 2222`` is "extra arguments"
to ssh, where ``str.splitlines`` made it two settings. A line holding one of the
characters ``splitlines`` would break at (other than the ``\\r`` of CRLF and the
``\\f`` ssh strips from a line's end) is refused, naming its file and line.
"""

from __future__ import annotations

import re

from clusterlaunch.core.errors import UsageError

_NOT_BREAKS = re.compile("[\r\v\f\x1c-\x1e\x85\u2028\u2029]")
_SSH_STRIPS_AT_END = " \t\r\n\f"  # readconf.c: trailing WHITESPACE and \f go


def config_lines(text: str, path: str) -> list[str]:
    """The lines of config ``text`` as ssh reads them (``path`` names it in a refusal)."""
    lines = text.split("\n")
    if _NOT_BREAKS.search(text) is None:  # the usual file: one search, no loop
        return lines
    for number, line in enumerate(lines, start=1):
        found = _NOT_BREAKS.search(line.rstrip(_SSH_STRIPS_AT_END))
        if found is not None:
            raise UsageError(
                f"{path}:{number}: contains {found[0]!r}, which ssh reads as part of a word, "
                "not as the end of a line; remove it or end the line there"
            )
    return [line.rstrip(_SSH_STRIPS_AT_END) for line in lines]
