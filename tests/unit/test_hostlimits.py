"""remote/hostlimits.py: a session too limited to start the job, named with its limit.
(Against real sshd, ``setup: ulimit -n 8`` and a pids cgroup: tests/cluster/test_os_limits.py.)"""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

from clusterlaunch.remote.hostlimits import limit_text, limits_problem

ROOT = Path(__file__).resolve().parents[2]


def _in_a_session_with(files: int) -> str:
    """What ``limits_problem`` says in a Python whose ``ulimit -n`` is ``files``."""
    code = (
        "import resource, sys; sys.path.insert(0, sys.argv[1]);"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[2]),) * 2);"
        "from clusterlaunch.remote.hostlimits import limits_problem;"
        "print(limits_problem(probe=True))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code, str(ROOT), str(files)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_too_few_open_files_are_named_with_the_limit_and_the_fix():
    said = _in_a_session_with(10)
    assert said == (
        "Too many open files: this host's session may open 10 files (ulimit -n), too few to "
        "start the job; raise it: ulimit -n in setup:, or nofile in the host's limits.conf"
    )


def test_enough_open_files_and_processes_pass():
    assert _in_a_session_with(64) == "None"
    assert limits_problem(probe=False) is None


def test_a_fork_refused_for_want_of_processes_names_ulimit_u_or_pids_max():
    said = limit_text(OSError(errno.EAGAIN, "Resource temporarily unavailable"))
    assert said is not None
    assert said.startswith("this host's session may start no more processes (")
    assert "pids.max" in said and said.endswith("or the cgroup's pids.max")


def test_other_errors_are_no_limit():
    assert limit_text(OSError(errno.ENOENT, "No such file or directory")) is None
    assert limit_text(OSError(errno.EACCES, "Permission denied")) is None
