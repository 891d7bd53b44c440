"""Integers YAML would change behind the user's back (``0755``, ``0x1F``, ``1:30:00``, ``08``).

:mod:`clusterlaunch.core.yamlines` makes each one a :class:`NumberForm`; the hosts
file reader refuses the first one it finds, saying what YAML reads and both fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# The one integer form every YAML reader agrees on, and every one reads back as written.
DECIMAL = re.compile(r"0|-?[1-9][0-9]*")
# Unquoted text YAML 1.1 keeps as text but YAML 1.2 (and people) read as a number.
NUMBER_TEXT = re.compile(r"[-+]?0(?:[0-9_]+|o_*[0-7][0-7_]*)")
SHOWN = 30  # characters of a number a message shows, so that it stays one line


@dataclass(frozen=True, repr=False)
class NumberForm:
    """An unquoted integer not in plain decimal (``0755``, ``0x1F``, ``1:30:00``, ``08``).

    Neither an ``int`` nor a ``str``, so no field validator takes it by mistake.
    """

    text: str
    line: int
    number: int | None  # what ``reader`` makes of it; None: too long to show
    reader: str = "YAML"

    def __str__(self) -> str:
        return self.text  # as a mapping key it stays as written

    __repr__ = __str__

    def problem(self, shown: bool = True) -> str:
        """The refusal: what YAML makes of it, and the two ways to write it; not
        ``shown``: without the number (a variable's value, which may be a secret)."""
        if not shown:
            return (
                f"is not a plain decimal integer ({self.reader} reads it as a number in another "
                "base or form; the value is not shown): quote it if it is text, or write the "
                "number in decimal"
            )
        text = self.text if len(self.text) <= SHOWN else self.text[: SHOWN - 3] + "..."
        known = self.number is not None
        reads = f": {self.reader} reads it as {self.number}" if known else ""
        decimal = f" ({self.number})" if known else ""
        return (
            f"{text} is not a plain decimal integer{reads}; "
            f'quote it ("{text}") if it is text, or write the number in decimal{decimal}'
        )


def yaml12_number(text: str) -> int | None:
    """``08``, ``0o17``: what YAML 1.2 reads (``None``: too long to show)."""
    digits = text.lstrip("+-").replace("_", "")
    if len(digits) > SHOWN:
        return None
    number = int(digits[2:], 8) if digits.startswith("0o") else int(digits)
    return -number if text.startswith("-") else number


def first_number_form(data: Any, field: str = "") -> tuple[str, NumberForm] | None:
    """The first :class:`NumberForm` in ``data``, with its field (``hosts[0].env.A``)."""
    if isinstance(data, NumberForm):
        return field, data
    if isinstance(data, dict):
        items = [(f"{field}.{key}" if field else str(key), value) for key, value in data.items()]
    elif isinstance(data, list | tuple):
        items = [(f"{field}[{index}]", value) for index, value in enumerate(data)]
    else:
        return None
    for name, value in items:
        found = first_number_form(value, name)
        if found is not None:
            return found
    return None
