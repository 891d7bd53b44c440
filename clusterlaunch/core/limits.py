"""Every size and range clusterlaunch accepts, and the checks for single values.

Small inputs must not eat gigabytes: a 368-byte YAML alias bomb, a
``gpu[1-1000000000]`` range or ``gpus: 1000000000000`` are refused with one
line naming the limit, before anything is built from them. The numbers are
documented in docs/cli.md and docs/hosts-file.md; change them there too.
"""

from __future__ import annotations

import contextlib
import re

from clusterlaunch.core.errors import UsageError

MAX_HOSTS_FILE_BYTES = 1 << 20
"""1 MiB: 4,096 hosts written one per line with env and setup fit in a third of it."""
MAX_YAML_NODES = 65_536
"""YAML nodes in the hosts file, aliases counted each time they are used (expanded).
A 4,096-host file written one host per entry needs 5-15 per host. Loading this
many took 1.1 s of CPU here; it bounds alias bombs and flow-style floods alike."""
MAX_YAML_DEPTH = 32
"""Nesting of YAML collections; a hosts file needs 5 (top, hosts, entry, env, value)."""
MAX_HOSTS = 4_096
"""Hosts in one job, after range expansion: one SSH connection and one paramiko
thread each on the controller; beyond this, use the scheduler's own launcher."""
MAX_PROCS_PER_HOST = 1_024
"""``gpus:``/``slots=`` per host: 8-16 GPUs, or one process per core on a CPU host."""
MAX_WORLD_SIZE = 65_536
"""Ranks in one job (the sum of ``gpus``): 4,096 hosts of 16 GPUs."""

MAX_ARG_BYTES = 131_071
"""The longest word a host's ``exec`` takes: one argument, or one ``NAME=VALUE`` of
the job's environment (5 bytes less: ``/bin/sh`` gets it as ``__cl_NAME=VALUE``,
:mod:`clusterlaunch.core.envhandoff`). Linux's MAX_ARG_STRLEN is 32 pages = 131,072 bytes, its NUL
included (more with pages over 4 KiB; less nowhere). Measured on the sandbox (sshd
on loopback): a word of 131,071 bytes ran, 131,072 failed ("env: Argument list too
long"). The command itself is not an argument: it travels on stdin
(:func:`clusterlaunch.core.commands.for_login_shell`)."""

MAX_EXEC_BYTES = 1 << 20
"""What the job's words (arguments and environment) may take in all, each with its
NUL and 8-byte pointer: half of Linux's usual ARG_MAX (a quarter of the 8 MiB stack,
2 MiB), the other half left to the host's own environment (module systems make it
large). Measured on the sandbox: 20 words of 100,000 bytes ran, 21 failed."""

MAX_RESTARTS = 1_000
"""``--max-restarts``: a job that failed a thousand times needs a person, not a loop."""

_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?|\.[0-9]{1,9}")
_WHOLE = re.compile(r"[0-9]{1,9}")


class Number:
    """An argparse ``type`` for a number flag with a range, checked where it is parsed.

    Only plain ASCII decimals are numbers here: ``nan``, ``inf``, ``1e3``,
    ``-5``, ``1_000`` and non-ASCII digits (all of which ``float()`` takes) are
    refused with one line naming the flag and the range.
    """

    def __init__(self, flag: str, low: float, high: float, what: str, whole: bool = False) -> None:
        self.flag = flag
        self.low = low
        self.high = high
        self.what = what
        self.whole = whole
        self.__name__ = "whole number" if whole else "number"  # for argparse's messages

    def __call__(self, text: str) -> float:
        pattern = _WHOLE if self.whole else _DECIMAL
        value = float(text) if pattern.fullmatch(text) else None
        if value is None or not self.low <= value <= self.high:
            raise UsageError(f"{self.flag} {shown(text)}: use {self.allowed}")
        return int(value) if self.whole else value

    @property
    def allowed(self) -> str:
        """``a number of seconds from 0 to 3,600``: what the flag takes, for messages."""
        return f"{self.what} from {_plain(self.low)} to {_plain(self.high)}"


def _plain(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


SECONDS = "a number of seconds"
GRACE = Number("--grace", 0, 3600, SECONDS)
HEARTBEAT_TIMEOUT = Number("--heartbeat-timeout", 2, 86_400, SECONDS)
CONNECT_TIMEOUT = Number("--connect-timeout", 1, 3600, SECONDS)
TIMEOUT = Number("--timeout", 1, 365 * 86_400, SECONDS)
SETUP_TIMEOUT = Number("--setup-timeout", 1, 86_400, SECONDS)
STALL_TIMEOUT = Number("--stall-timeout", 1, 365 * 86_400, SECONDS)
SSH_PORT = Number("Port", 1, 65535, "a TCP port", whole=True)
RSA_SIZE = Number("RequiredRSASize", 1, 16384, "a number of bits", whole=True)
CONNECTION_ATTEMPTS = Number("ConnectionAttempts", 1, 1000, "a number of tries", whole=True)
FANOUT = Number("--fanout", 1, MAX_HOSTS, "a whole number of connections", whole=True)
MAX_RESTARTS_FLAG = Number("--max-restarts", 0, MAX_RESTARTS, "a whole number", whole=True)
RESTART_BACKOFF = Number("--restart-backoff", 0, 3600, SECONDS)
MIN_HOSTS = Number("--min-hosts", 1, MAX_HOSTS, "a whole number of hosts", whole=True)
GPUS_PER_HOST = Number("--gpus-per-host", 1, MAX_PROCS_PER_HOST, "a whole number", whole=True)


def text(flag: str, value: str, *, sent: bool = True) -> str:
    """A string flag's value: not blank, and (``sent``: it goes to the hosts) valid UTF-8.

    Bytes that are not UTF-8 arrive from the command line as surrogate escapes;
    the hosts could only get them mangled, so they are refused here, before
    anything is contacted.
    """
    if not value.strip():
        raise UsageError(f"{flag} {value!r}: give a non-empty value")
    if sent:
        sendable(flag, value)
    return value


def _unsendable(value: str) -> str | None:
    """Why ``value`` cannot be sent as UTF-8 text ("nul" or "utf-8"), or None if it can."""
    if "\x00" in value:
        return "nul"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "utf-8"
    return None


def sendable(flag: str, value: str) -> str:
    """Refuse text that cannot be sent as UTF-8 (non-UTF-8 bytes, NUL)."""
    why = _unsendable(value)
    if why == "nul":
        raise UsageError(f"{flag} {shown(value)}: contains a NUL byte")
    if why == "utf-8":
        raise UsageError(
            f"{flag} {shown(value)}: not valid UTF-8; hosts receive text, "
            "so rename it or pass it in UTF-8"
        )
    return value


def sendable_value(where: str, value: str) -> str:
    """:func:`sendable` for a variable's value, which may be a secret: the message names
    ``where`` (the variable) and never shows the value, as the size limits' do. Printed
    escaped, it would not even be masked as the raw bytes are in a CI log."""
    why = _unsendable(value)
    if why == "nul":
        raise UsageError(f"{where}: its value contains a NUL byte (the value is not shown)")
    if why == "utf-8":
        raise UsageError(
            f"{where}: its value is not valid UTF-8 (the value is not shown); hosts receive "
            "text, so set it in UTF-8"
        )
    return value


# Not beginning with "-": the hosts' programs would take "--job-id -x" for an option. It
# names remote paths and torchrun's log folder: "a/b" as --rdzv-id crashed torchrun.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def job_id(flag: str, value: str) -> str:
    """A job id (``--job-id``, torchrun's ``--rdzv-id``): what a file name may hold."""
    if not _JOB_ID.fullmatch(value):
        raise UsageError(
            f"{flag} {shown(value)}: use 1-64 letters, digits, '.', '_' or '-', "
            "beginning with a letter or digit"
        )
    return value


def shown(value: str, limit: int = 80) -> str:
    """``value`` quoted for a one-line message: escapes for bytes, cut to ``limit`` characters."""
    text = repr(value)
    if any("\udc80" <= char <= "\udcff" for char in value):  # bytes from argv: show them
        with contextlib.suppress(UnicodeEncodeError):
            text = repr(value.encode("utf-8", "surrogateescape"))[1:]
    return text if len(text) <= limit else text[: limit - 4] + "...'"
