"""Exit statuses: the one table the command line, the agent and the transports share.

Also bundled into the programs that run on the hosts (see
:mod:`clusterlaunch.remote`), so it stays stdlib-only, Python >= 3.8, and has no
``from __future__`` import (a bundle is one concatenated file), and no
``typing`` import (3 to 4 ms of the agent's start-up, measured here; the
annotation below is a string instead). Nor ``enum``: the statuses are plain
ints, named; an IntEnum cost every agent 2-3 ms of its start-up (``python -S``,
60 rounds here), and nothing here needs more than the names.
docs/cli.md lists the same statuses for users (a unit test compares the two).
"""


class ExitStatus:
    """What the shell sees when clusterlaunch (or one host's agent) exits: named ints."""

    OK = 0
    FAILED = 1
    """An error clusterlaunch reports without a more specific status."""
    USAGE = 2
    """Bad input or a failed preflight: nothing was started on any host."""
    TIMEOUT = 124
    """``--timeout`` ran out (the status timeout(1) uses)."""
    STALLED = 125
    """``run --stall-timeout S --stall-action kill``: no rank printed for S seconds."""
    CANNOT_EXECUTE = 126
    """The job's program was found on a host but could not be executed (as a shell)."""
    NOT_STARTED = 127
    """The job's program (or its ``#!`` interpreter) was not found on a host."""
    HANGUP = 129
    INTERRUPTED = 130
    """Ctrl-C (SIGINT)."""
    KILLED = 137
    """Stopped with ``clusterlaunch kill``."""
    BROKEN_PIPE = 141
    """The console's reader went away (``clusterlaunch run ... | head``)."""
    TERMINATED = 143
    HOST_LOST = 255
    """A host was lost, or its job ended without a report (ssh's own status for this)."""


SIGNAL_BASE = 128
"""A process ended by signal N exits ``128 + N`` in a shell."""


def from_signal(signum: int) -> int:
    """The status of a process ended by signal ``signum``."""
    return SIGNAL_BASE + int(signum)


def shell_status(returncode: "int | None") -> int:
    """A Popen-style return code as a shell reports it; no code at all means a lost host."""
    if returncode is None:
        return int(ExitStatus.HOST_LOST)
    return SIGNAL_BASE - returncode if returncode < 0 else returncode
