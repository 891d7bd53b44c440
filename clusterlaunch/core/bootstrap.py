"""How a remote program reaches a host: the bootstrap on the command line and the payload on stdin.

The programs (the agent, the probe, jobctl, doctor) are not installed on the
hosts. ``PYTHON -c BOOTSTRAP`` first refuses a Python older than
:data:`MIN_PYTHON` in one line, then reads exactly ``size`` bytes from stdin (looping,
since a read may return less; exit 98 if stdin closes early) and runs them;
what follows on stdin belongs to the program. The payload carries the program
twice, each part zlib-compressed:

* compiled by the controller (``marshal``), run when the host's Python has the
  controller's bytecode magic number, as a ``.pyc`` would be;
* as source, compiled on the host otherwise (another Python version, PyPy).

Compiling the agent's 64 KB of source took each host 12-21 ms of its start-up
(``python -S``: 58 against 90 ms median, 29 against 40 ms first quartile,
measured on a loaded 2-core machine), and both parts compressed are about the
size of the source alone (the agent 60 against 64 KB; the smaller programs up to
6% more).
"""

from __future__ import annotations

import marshal
import re
import zlib
from importlib.util import MAGIC_NUMBER

_OFFSET_DIGITS = 8
_HEADER = 4 + _OFFSET_DIGITS  # the magic number, then where the source part starts

PAYLOAD_CUT_SHORT = 98
"""The bootstrap's status when stdin ends before the whole payload came (the controller left)."""
MIN_PYTHON = (3, 8)
"""The oldest Python the hosts may run: the remote programs use what came with it."""
_MAJOR, _MINOR = MIN_PYTHON
_TOO_OLD = (
    f"is Python %d.%d; clusterlaunch needs Python {_MAJOR}.{_MINOR} or newer on the hosts "
    "(set python: in the hosts file, or --python)"
)
# Parsed by every Python from 2.7 on (no walrus, no f-string), so that an older one
# than MIN_PYTHON says what it is in one line (sys.exit: stderr, status 1) rather
# than a SyntaxError. The magic number is read where importlib keeps it in every
# CPython since 3.5; an interpreter without it compiles the source.
_BOOTSTRAP = (
    "import marshal,os,sys,zlib;v=sys.version_info[:2];v<{min} and sys.exit("
    '"clusterlaunch: %s ' + _TOO_OLD + '"%((sys.executable,)+v));b=bytearray();'
    "[b.extend(os.read(0,{size}-len(b)) or os._exit({cut})) for _ in iter(lambda:len(b)<{size},"
    "False)];n=int(b[4:{header}]);exec(marshal.loads(zlib.decompress(b[{header}:n])) if "
    'b[:4]==getattr(sys.modules.get("_frozen_importlib_external"),"MAGIC_NUMBER",0) else '
    'compile(zlib.decompress(b[n:]),"clusterlaunch-{name}","exec"))'
)
_TOO_OLD_SAID = "[^\n]+? " + re.escape(_TOO_OLD).replace("%d", "[0-9]+")
# A line of its own, or one of render.last_lines' (joined by " | ").
_TOO_OLD_LINE = re.compile(f"(?:^| \\| )clusterlaunch: ({_TOO_OLD_SAID})(?=$| \\| )", re.M)


def too_old_python(stderr: str) -> str | None:
    """What the bootstrap said of a host Python older than :data:`MIN_PYTHON`
    (``PATH is Python 3.6; clusterlaunch needs ...``), if ``stderr`` (its lines, or
    :func:`~clusterlaunch.core.render.last_lines`) holds it."""
    found = _TOO_OLD_LINE.search(stderr)
    return found.group(1) if found else None


def ran_no_python(status: int) -> bool:
    """Whether a host's shell that ended with ``status`` before the bootstrap wrote a byte,
    when nothing else explains it (no ``cd`` failed, no setup failed, no srun refused),
    means ``python:`` names a program that is no Python (``/bin/bash``: 2, ``env``: 125).

    A Python runs ``-S -c BOOTSTRAP`` whatever its version; the shell's own statuses
    (126, 127: found but not executable, not found), a signal's (128 + N) and the
    bootstrap's own say something else.
    """
    return 0 < status < 126 and status != PAYLOAD_CUT_SHORT


def not_a_python(python: str, status: int) -> str:
    """The line for a ``python:`` that is no Python (see :func:`ran_no_python`)."""
    return (
        f"python: {python} is not a Python (it exited {status} before clusterlaunch's Python "
        f"started); set python: to a Python {_MAJOR}.{_MINOR} or newer in the hosts file "
        "(or --python)"
    )


_FATAL = re.compile(r"Fatal Python error: ([^\n|]+)")
_PATH_VARIABLE = re.compile(r"(PYTHONHOME|PYTHONPATH) = '([^'\n]*)'")  # its path configuration


def could_not_start(python: str, status: int, said: str) -> str | None:
    """The line for a ``python:`` that is a Python but could not start, from what it
    ``said`` (``Fatal Python error: ...``), or None. A PYTHONHOME (or PYTHONPATH) that a
    host's setup exports breaks every Python it starts: "is not a Python; set python:"
    hid Python's own words and blamed the wrong line of the hosts file."""
    fatal = _FATAL.search(said)
    if fatal is None:
        return None
    found = [f"{name}={value}" for name, value in _PATH_VARIABLE.findall(said)]
    blame = (
        f"its environment has {' and '.join(found)}"
        if found
        else "PYTHONHOME or PYTHONPATH in its environment may point it elsewhere"
    )
    return (
        f"{python} failed to start (exit {status}): Fatal Python error: "
        f"{fatal.group(1).strip()}; {blame} (from setup: or the host's login files): "
        "unset or correct it"
    )


def bootstrap_argv(python: str, name: str, size: int, site: bool = True) -> list[str]:
    """``python [-S] -c <bootstrap>``: runs the ``size``-byte payload read from stdin.

    Stdlib-only programs (the agent, the probe, jobctl) run with ``-S``: skipping
    site-packages saves most of the interpreter's start-up (81 ms of 95 ms
    measured here), once per host and job. The agent's and the probe's checks
    need the job's ``sys.path`` (torch, ``-m`` modules): they run ``site.main()``
    themselves, once their stdout is out of reach of what it runs
    (``remote/channel.py``). The doctor program runs ``site`` as Python starts.
    """
    flags = [] if site else ["-S"]
    code = _BOOTSTRAP.format(
        size=size, name=name, header=_HEADER, min=f"({_MAJOR},{_MINOR})", cut=PAYLOAD_CUT_SHORT
    )
    return [python, *flags, "-c", code]


def encode_payload(name: str, source: bytes) -> bytes:
    """The bytes the bootstrap reads: ``source`` compiled by this Python, and as it is."""
    code = compile(source, f"clusterlaunch-{name}", "exec", dont_inherit=True)
    compiled = zlib.compress(marshal.dumps(code), 9)
    offset = b"%0*d" % (_OFFSET_DIGITS, _HEADER + len(compiled))
    return MAGIC_NUMBER + offset + compiled + zlib.compress(source, 9)


def is_payload_for_this_python(payload: bytes) -> bool:
    """Whether ``payload``'s header says it was compiled by this Python's bytecode, its
    source part starting inside it (not that it is whole: a stored one is checked against
    its seal, :mod:`clusterlaunch.remote.payloadcache`)."""
    offset = payload[4:_HEADER]
    return payload[:4] == MAGIC_NUMBER and offset.isdigit() and _HEADER < int(offset) < len(payload)
