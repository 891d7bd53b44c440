"""How the job's variables reach a host's program with no value on any command line.

The ``exec env NAME=VALUE ARGV`` used before showed every value in
``/proc/PID/cmdline`` of ``env``, which any user of the host can read (a
hostile tester's spy, as user nobody, caught secrets in 4 of 24 starts). The
command itself travels on stdin (:func:`clusterlaunch.core.commands.for_login_shell`);
the values now stay off every argv too:

* the login shell exports each value as ``__cl_NAME`` (``export`` is a builtin,
  and no shell gives those names a meaning);
* ``exec /bin/sh -c SCRIPT sh ARGV``: SCRIPT (:func:`renaming_script`) holds
  names only; it exports each ``NAME`` from its ``__cl_NAME``, unsets those,
  and ``exec "$@"``.

Why not ``export NAME=VALUE`` in the login shell itself: not all of its
variables are plain ones, and they differ from shell to shell. zsh refuses
``COLUMNS=80x`` ("bad math expression"), ``status`` or ``path``, and for root
``USERNAME=nobody`` made the shell that user; bash evaluates ``OPTIND`` or
``RANDOM`` as arithmetic (``a[$(cmd)]`` ran ``cmd``); an rc file may make
``TMOUT`` read-only. A fresh ``/bin/sh`` (dash, or bash as ``sh``) reads no rc
file, and the few names it treats specially are refused by
:mod:`clusterlaunch.core.envpolicy`. The words of ARGV are expanded by the
login shell before any variable is set (a ``~`` with the host's own ``HOME``).
It costs no more than ``env`` did: 9.4 against 9.7 ms of CPU for ``bash -c`` to
start ``python -S -c pass`` with two variables (dash as ``/bin/sh``, median of 6
paired rounds of 150, a loaded 2-core machine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

HELD = "__cl_"
"""The prefix of the name each value reaches ``/bin/sh`` under: 5 bytes more per variable."""
SHELL = "/bin/sh"


def renaming_script(names: Iterable[str]) -> str:
    """``export NAME="$__cl_NAME"... && unset __cl_NAME... && exec "$@"``.

    ``names`` are shell identifiers (``envpolicy`` checked them), so nothing here
    needs quoting. Every word of ``export`` is expanded before it assigns any, so
    a name that is itself ``__cl_X`` (and, then, not unset) spoils no other.
    """
    chosen = list(names)
    exports = " ".join(f'{name}="${HELD}{name}"' for name in chosen)
    unset = " ".join(HELD + name for name in chosen if HELD + name not in chosen)
    return f'export {exports} && unset {unset} && exec "$@"'


def held(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """``env`` as the login shell exports it: ``(__cl_NAME, VALUE)`` pairs."""
    return [(HELD + name, value) for name, value in env.items()]


def exec_strings(env: Mapping[str, str], argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The argv and our environment strings of the host's largest ``execve`` for ``env``
    and ``argv``: ``/bin/sh``'s when there are variables (its script and ``__cl_`` names
    make it larger than the program's own), else the program's."""
    if not env:
        return list(argv), []
    return [SHELL, "-c", renaming_script(env), "sh", *argv], [f"{n}={v}" for n, v in held(env)]
