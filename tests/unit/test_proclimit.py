"""transport/proclimit.py: a thread or process that cannot start, said as the limit in force.
(The real limits, a pids cgroup on the controller: tests/cluster/test_os_limits.py.)"""

from __future__ import annotations

import errno
import resource
from collections.abc import Iterator

import pytest

from clusterlaunch.core.errors import LimitReached, UsageError
from clusterlaunch.transport.proclimit import converted, fork_failure, limits_text

VIRTUAL = 1 << 42  # 4 TiB: a soft ulimit -v nothing here comes near


@pytest.fixture
def virtual_memory_limit() -> Iterator[int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (VIRTUAL, hard))
    try:
        yield VIRTUAL // 1024
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_a_thread_that_cannot_start_is_a_limit_reached_exit_2(virtual_memory_limit):
    error = converted(RuntimeError("can't start new thread"))
    assert isinstance(error, LimitReached) and isinstance(error, UsageError)
    assert str(error).startswith("cannot start a thread: ")
    assert f"ulimit -v {virtual_memory_limit} (KiB of memory" in str(error)
    assert str(error).endswith("; raise it, or use fewer hosts or a lower --fanout")


def test_other_runtime_errors_are_left_as_they_are():
    error = RuntimeError("dictionary changed size during iteration")
    assert converted(error) is error


def test_limits_text_names_every_limit_in_force(virtual_memory_limit):
    text = limits_text()
    assert f"ulimit -v {virtual_memory_limit}" in text
    assert text.startswith(("the limit ", "one of the limits "))


def test_a_fork_that_failed_for_want_of_processes_names_the_limit(virtual_memory_limit):
    again = fork_failure(OSError(errno.EAGAIN, "Resource temporarily unavailable"))
    assert again.startswith("[Errno 11] Resource temporarily unavailable: the limit")
    assert f"ulimit -v {virtual_memory_limit}" in again
    missing = OSError(errno.ENOENT, "No such file or directory")
    assert fork_failure(missing) == "[Errno 2] No such file or directory"
