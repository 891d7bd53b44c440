"""Open-file limit for a launch on many hosts: raised as far as allowed, else refused early.

A connection holds a few descriptors for the whole job: paramiko a socket and
the channel's wake-up pipe (3), the OpenSSH client a master process's pipes,
its stderr (an unnamed file, ``sshlog``) and the session's stdin/stdout/stderr
(measured at 256 hosts: 4.1-4.4 a host, all of the controller's included).
Many systems start processes with a soft limit of 1,024, which 256 OpenSSH
hosts would pass mid-launch, failing hosts one by one with EMFILE. The soft
limit can be raised up to the hard one without privileges; a launch that
needs more than the hard limit is refused before anything is contacted,
naming the limit.
"""

from __future__ import annotations

import resource

from clusterlaunch.core.errors import UsageError

PER_HOST = 6
"""Descriptors budgeted per host (measured ≤ 5 with either client, plus headroom)."""
SPARE = 64
"""For everything else: the console, the SSH config, known_hosts, Python itself (``--log-dir``'s
files are counted apart: one per rank)."""


def needed(hosts: int, files: int = 0) -> int:
    """Descriptors a launch on ``hosts`` hosts, with ``files`` log files open, may hold at once."""
    return SPARE + PER_HOST * hosts + files


def ensure_open_files(hosts: int, files: int = 0) -> int:
    """Raise the soft RLIMIT_NOFILE to what ``hosts`` and ``files`` (``--log-dir``'s, each
    rank's open while it runs) need (if lower); returns the soft limit.

    Raises UsageError when even the hard limit is too low.
    """
    want = needed(hosts, files)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return soft
    if hard != resource.RLIM_INFINITY and hard < want:
        what, fewer = f"{hosts} hosts", "launch on fewer hosts"
        if files:  # each rank's file is open while it runs
            what, fewer = (
                f"{what} and {files} --log-dir files",
                f"{fewer} or ranks, or no --log-dir",
            )
        raise UsageError(
            f"{what} need up to {want} open files, and this shell allows {hard} "
            f"(ulimit -Hn); raise the hard limit (limits.conf nofile) or {fewer}"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want
