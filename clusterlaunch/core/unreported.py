"""A host whose stream ended without the agent's exit record: whether it was lost, and
what to say when its shell or ``setup:`` failed, or ran no Python, before
clusterlaunch's Python started (pure; the verdict is in :mod:`outcome`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from clusterlaunch.core.bootstrap import (
    could_not_start,
    not_a_python,
    ran_no_python,
    too_old_python,
)
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.setupguard import SetupWatch


def lost_without_report(status: int | None) -> bool:
    """Whether a host whose stream ended without the agent's exit record was lost.

    The agent always reports before it exits, so: no status or 255 (the link
    went: ssh's own status), or 0 once the agent ran, which only a transport
    gives on its own: srun exits 0 when Slurm declares the node failed (Slurm
    22.05, a killed slurmd). Any other status is the shell's or the setup's (127: no such
    python), a failure of its own.
    """
    return status in (None, ExitStatus.HOST_LOST, ExitStatus.OK)


def ended_before_python(in_setup: bool, tail: str = "") -> str:
    """A host's shell that exited 0 before our Python started: nothing ran, no success.

    ``in_setup``: the setup had begun and never finished, so it called ``exit``
    (a sourced script ending in ``exit 0``); else the shell ended on its own.
    """
    if in_setup:
        said = (
            "setup: ended the shell (exit 0) before clusterlaunch's Python started (a setup "
            "script that calls exit must be run, as bash FILE, not sourced)"
        )
    else:
        said = (
            "the shell ended (exit 0) before clusterlaunch's Python started (python: must name "
            "a Python interpreter, and no login file such as .bashrc may call exit)"
        )
    return f"{said}: {tail}" if tail else said


# The cd into the workdir failed, as bash, dash, zsh and ksh say it ("cd: /x: No such
# file or directory", "cd: can't cd to /x", "cd: no such file or directory: /x").
_CD_FAILED = re.compile(r"(?:^|[\s:])cd: ")


def shell_hints(tail: str) -> str:
    """Why a host's shell failed before our Python started, where its last lines tell: the
    workdir it could not cd to (the first thing it runs; the shell's message names the
    path), or what ``setup:`` exports counting toward the ``exec`` limits (unchecked
    beforehand). ``""`` when they tell nothing."""
    said = ""
    if _CD_FAILED.search(tail):
        said += (
            "; the workdir is not there (or not a directory this user may enter): "
            "create it on the host, or fix workdir: in the hosts file (or --workdir)"
        )
    if "Argument list too long" in tail:
        said += (
            "; the job's arguments and environment, with what setup: exports, are more "
            "than this host's exec takes: pass large data in a file"
        )
    return said


def _failed_before_python(status: int, in_setup: bool, tail: str) -> str:
    """``exec``'s line for a host whose setup or shell failed before our Python started
    (its own lines, printed above, say how)."""
    if in_setup:
        return f"setup: failed (exit {status}) before clusterlaunch's Python started; fix setup:"
    said = f"the shell failed (exit {status}) before clusterlaunch's Python started"
    if status == ExitStatus.NOT_STARTED:
        said += ": no such python? fix python: in the hosts file (or --python)"
    return said + shell_hints(tail)


def names_no_python(status: int, in_setup: bool, tail: str) -> bool:
    """Whether a host's shell that failed before our Python started ran a ``python:`` that is
    no Python (:func:`~clusterlaunch.core.bootstrap.ran_no_python`): nothing else explains
    it, neither the setup nor what the shell or srun said (:func:`shell_hints`)."""
    explained = in_setup or bool(shell_hints(tail)) or "srun: error:" in tail
    return not explained and ran_no_python(status)


def unreported_end(
    status: int | None,
    setup: SetupWatch,
    python_started: bool,
    last_lines: Sequence[str],
    python: str,
) -> tuple[int | None, str | None, bool]:
    """A host's stream ended without the agent's exit record: its status, what to say,
    and whether the host was lost.

    A setup stopped by its ``--setup-timeout`` watchdog took its shell with it
    (SIGTERM: no status): that host is not lost, its command never started,
    which is 2 as in ``run``'s preflight; the host's own line already said why.
    A shell that exited 0 before the agent's Python wrote a byte (``setup:``
    sourcing a script that ends in ``exit 0``, ``python: /bin/true``) ran
    nothing: it counts as failed, with 255 (no report), but was not lost.
    A Python older than the hosts need said so in its ``last_lines`` (the
    bootstrap's one line): nothing started, which is 2, as for a setup timeout, and for a
    ``python:`` that is no Python (its own status, bash's 2, says nothing of the job).
    """
    said_last = "\n".join(last_lines)
    if setup.timed_out or too_old_python(said_last):
        return int(ExitStatus.USAGE), None, False
    if (
        not python_started
        and status is not None
        and names_no_python(status, setup.running, said_last)
    ):
        said = could_not_start(python, status, said_last) or not_a_python(python, status)
        return int(ExitStatus.USAGE), said, False
    if status == ExitStatus.OK and not python_started:
        return int(ExitStatus.HOST_LOST), ended_before_python(setup.running), False
    if not python_started and status is not None and not lost_without_report(status):
        said = _failed_before_python(status, setup.running, said_last)
        return status, said, False
    said = "no exit status" if status is None else f"exit {status}"
    return status, f"connection ended without a report ({said})", lost_without_report(status)
