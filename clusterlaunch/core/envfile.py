"""Environment files (``--env-file FILE``, ``env_file:``): ``KEY=VALUE`` lines, ``#`` comments.

The docker/systemd convention: one assignment per line, blank lines and lines
starting with ``#`` ignored, an optional ``export`` before the name (so a file
that a shell can ``source`` works too). The value is the rest of the line,
taken literally (no ``$`` expansion, no escapes); one pair of matching quotes
around all of it is removed, as systemd and docker compose do. The values then
travel like ``--env`` ones: each quoted, nothing expanded on the host.

Errors name the file, the line and the variable (``vars.env:3: expected
KEY=VALUE, got a line without '='``), never a value; a name set twice is refused
rather than "the last one wins".
"""

from __future__ import annotations

import os

from clusterlaunch.core import envpolicy
from clusterlaunch.core.errors import HostsFileError

MAX_ENV_FILE_BYTES = 1 << 20
"""1 MiB, as for a hosts file: a few hundred variables take a few KiB."""
_MISSING = "no such file"
_BLANKS = " \t"


class UnreadableEnvFile(HostsFileError):
    """The env file could not be opened; ``why``: the system's reason (``Is a directory``)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(
            name, None, "", "no such env file" if why == _MISSING else f"cannot read it: {why}"
        )
        self.why = why


def named_in_hosts_file(name: str, path: str, line: int | None, field: str) -> dict[str, str]:
    """The variables of ``env_file: NAME`` in hosts file ``path``: a relative ``name`` is
    relative to the hosts file's directory. One it cannot open is that line's mistake."""
    local = os.path.join(os.path.dirname(path), os.path.expanduser(name))
    shown = name if os.path.isabs(name) else local
    try:
        return read_env_file(local, shown)
    except UnreadableEnvFile as exc:
        fix = "give the path of a KEY=VALUE file, absolute or relative to the hosts file's folder"
        raise HostsFileError(path, line, field, f"cannot read {shown}: {exc.why}; {fix}") from None


def read_env_file(path: str, shown_as: str | None = None) -> dict[str, str]:
    """The variables of the env file at ``path`` (``shown_as``: its name in messages)."""
    name = shown_as or path
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ENV_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UnreadableEnvFile(name, _MISSING) from None
    except OSError as exc:
        raise UnreadableEnvFile(name, exc.strerror or str(exc)) from None
    if len(data) > MAX_ENV_FILE_BYTES:
        raise HostsFileError(name, None, "", "larger than 1 MiB, the limit for an env file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HostsFileError(name, line, "", "not UTF-8 text; save it as UTF-8") from None
    return parse_env_text(text, name)


def parse_env_text(text: str, path: str) -> dict[str, str]:
    """The ``KEY=VALUE`` assignments of ``text``, in file order (``path`` is for messages)."""
    found: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        # Lines end at \n only, as a shell and docker read them (str.splitlines would
        # also end one at \f, \x1c or U+2028: one line, two variables); a CRLF
        # file's \r goes, and only the shell's blanks are trimmed.
        line = raw.removesuffix("\r").strip(_BLANKS)
        if not line or line.startswith("#"):
            continue
        if line.startswith("export ") or line.startswith("export\t"):
            line = line[len("export") :].lstrip(_BLANKS)
        name, equals, value = line.partition("=")
        if not equals or not name:  # the line is not shown: it may be a value's (a PEM key's)
            got = "a line without '='" if not equals else "no name before '='"
            raise HostsFileError(path, number, "", f"expected KEY=VALUE, got {got}")
        why = envpolicy.refusal(name)
        if why is not None:
            raise HostsFileError(path, number, name, why)
        if name in found:
            raise HostsFileError(
                path, number, name, f"is set twice (also at line {lines[name]}); keep one"
            )
        value = _unquoted(value)
        if "\x00" in value:
            raise HostsFileError(path, number, name, "contains a NUL byte")
        found[name], lines[name] = value, number
    return found


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value
