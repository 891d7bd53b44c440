"""A host's limits on open files and processes, named where they keep the job from starting.

Stdlib only, Python >= 3.8; bundled into the agent and the probe. A host whose
session may open few files (``ulimit -n 8`` in its ``setup:``, its limits.conf)
or start no more processes (``ulimit -u``, a cgroup's ``pids.max``) passed the
preflight; the agent then could not start the job ("[Errno 24] Too many open
files"), printed a traceback of its own (listing /proc takes a descriptor too)
and exited 127 or 126, a shell's "not found" and "could not execute". Now the
preflight takes what the agent's start takes (:func:`limits_problem`), and a
start that fails all the same names the limit (:func:`limit_text`).
"""

import os

EMFILE, ENFILE, EAGAIN = 24, 23, 11  # errno's numbers on Linux, without importing errno
START_FDS = 9
"""Descriptors the agent's start takes beyond those it holds in its checks (6 here, 8 by
the start): three pipes and the job's /dev/null (``spawn.start_job``). Measured with one
rank: ``ulimit -n 14`` failed at the job's /dev/null, 15 ran; the preflight says so at 14."""
PROBE_FDS = 2
"""What the agent holds beyond the probe (4 here): its wake-up pipe."""
NO_PROGRAM = "/dev/null/clusterlaunch"
"""Never a program (below a file): started only to learn whether a process can be."""


def limit_text(exc):
    """What the limit behind ``exc`` (an OSError of starting a process) is, with the fix;
    None where no limit is behind it."""
    number = getattr(exc, "errno", None)
    if number == EMFILE:
        return (
            "this host's session may open %s files (ulimit -n), too few to start the job; "
            "raise it: ulimit -n in setup:, or nofile in the host's limits.conf"
            % _soft_limit("OPEN_MAX")
        )
    if number == ENFILE:
        return (
            "this host is out of open files altogether (fs.file-max); raise fs.file-max there, "
            "or end what holds them"
        )
    if number == EAGAIN:  # only a fork gives it here
        return (
            "this host's session may start no more processes (%s); raise it: ulimit -u in "
            "setup:, nproc in the host's limits.conf, or the cgroup's pids.max" % _process_limits()
        )
    return None


def limits_problem(probe):
    """Why the agent could not start the job here for want of descriptors or a process,
    or None: what its start takes (``START_FDS`` descriptors, and ``PROBE_FDS`` for the
    ``probe``; one process) is taken and given back at once."""
    held, failed = [], None
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
        while len(held) < START_FDS + (PROBE_FDS if probe else 0):
            held.append(os.dup(held[0]))
        # A process made and gone: its exec of no program fails in the child, and glibc's
        # posix_spawn reaps it. 0.1-0.3 ms here (a loaded 2-core machine); fork and
        # waitpid took 0.6-1.4 ms.
        os.posix_spawn(NO_PROGRAM, [NO_PROGRAM], {})
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as exc:
        failed = exc
    finally:
        for fd in held:
            os.close(fd)
    return None if failed is None else _limit_said(failed)  # said once they are given back


def _limit_said(exc):
    return "%s: %s" % (exc.strerror or exc, limit_text(exc) or "the job could not start either")


def _process_limits():
    """The process limits that may apply here: root is not bound by ``ulimit -u``."""
    soft = _soft_limit("CHILD_MAX")
    if soft == "unlimited":
        return "a cgroup's pids.max; ulimit -u is unlimited"
    if os.geteuid() == 0:
        return "a cgroup's pids.max; ulimit -u does not bind root"
    return "ulimit -u %s, or a cgroup's pids.max" % soft


def _soft_limit(name):
    """A soft limit by sysconf (glibc's getrlimit), which takes no descriptor: importing
    ``resource`` failed with EMFILE itself."""
    soft = os.sysconf("SC_" + name)
    return "unlimited" if soft < 0 else str(soft)
