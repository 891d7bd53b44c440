"""``--log-dir``'s files under hostile limits: one that cannot be written (``ulimit -f``) is
given up alone, a console that fails costs them no frame, an attempt's files are closed when
it ends, and what is created is never writable by group or others, whatever the umask.

A file too large is the kernel's own EFBIG: the writes run in a forked child that lowered
its RLIMIT_FSIZE (Python ignores SIGXFSZ), so this process keeps its limits.
"""

from __future__ import annotations

import io
import json
import os
import resource
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core.errors import OutputLost, UsageError
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.testing.agentscript import FakeAgent, Hang, exits, rank_output, started, stopping
from clusterlaunch.testing.fakes import FakeConnection
from tests.unit.plans import two_ranks_per_host


def _in_a_child_limited_to(size: int, work: Callable[[], Any]) -> Any:
    """What ``work`` returns (as JSON) in a forked child whose files may not outgrow ``size``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
            said = json.dumps(work())
        except BaseException as exc:
            said = json.dumps(f"raised {exc!r}")
        finally:
            os.write(write, said.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    return json.loads(said)


def test_a_file_too_large_is_given_up_alone_and_stops_the_job_once(tmp_path: Path) -> None:
    def work() -> list[list[str]]:
        log_dir = LogDir(str(tmp_path))
        log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
        stops = []
        for name, size in [("rank-1.log", 10_000), ("rank-0.log", 100), ("rank-1.log", 10),
                           ("controller.log", 10_000), ("rank-0.log", 100)]:  # fmt: skip
            try:
                log_dir.write(name, b"x" * size)
                log_dir.flush()
            except OutputLost as stop:
                stops.append(stop.reason)
        unsaid = log_dir.unsaid()
        log_dir.close()
        return [stops, unsaid, log_dir.unsaid()]

    stops, unsaid, again = _in_a_child_limited_to(4096, work)
    too_large = [f"cannot write {tmp_path}/{name} (File too large)" for name in
                 ("rank-1.log", "controller.log")]  # fmt: skip
    assert stops == too_large[:1]  # the job stops once, for the first
    assert unsaid == too_large and again == []  # each said once, by whoever says them
    assert (tmp_path / "rank-0.log").read_bytes() == b"x" * 200  # before and after
    assert (tmp_path / "rank-1.log").stat().st_size == 4096  # what fitted


def test_the_console_gets_every_line_and_the_job_stops_once_the_chunk_is_out(
    tmp_path: Path,
) -> None:
    """Rank 1's file outgrows the limit in the middle of one read's frames. The log was
    written first, and its failure skipped the console's copy of that block and every
    frame after it in the read; the other files got nothing more."""
    big = b"x" * 99 + b"\n"
    agent = FakeAgent(
        [started(), rank_output(1, big * 100), rank_output(0, b"after\n"),
         rank_output(1, b"more\n"), Hang()],
        on={"t": [stopping("requested"), rank_output(0, b"bye\n"), *exits(-15, "requested")]},
    )  # fmt: skip

    def work() -> list[str]:
        log_dir = LogDir(str(tmp_path))
        log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
        out, err = io.BytesIO(), io.BytesIO()
        plan = two_ranks_per_host(["a"])
        ranks = [(0, "a", 0), (1, "a", 1)]
        router = OutputRouter(Prefixes(ranks, ["a"], False), Console(out, err), log_dir=log_dir)
        outcome = Supervisor(plan, {"a": FakeConnection("a", agent)}, router).run()
        log_dir.close()
        return [outcome.reason, out.getvalue().decode()]

    reason, shown = _in_a_child_limited_to(4096, work)
    assert reason == f"cannot write {tmp_path}/rank-1.log (File too large)"
    lines = [f"[r1 a:1] {big.decode()}"] * 100 + ["[r0 a:0] after\n", "[r1 a:1] more\n"]
    assert shown == "".join(lines) + "[r0 a:0] bye\n"
    assert (tmp_path / "rank-0.log").read_bytes() == b"after\nbye\n"


def test_a_restart_writes_a_given_up_file_again_and_its_first_loss_stops_it(
    tmp_path: Path,
) -> None:
    """controller.log outgrows the limit in attempt 1. Before the restart it is tried again:
    refused while the limit holds, written again (from a line that says lines are missing)
    once it is raised. A file of attempt 2 that then fails stops attempt 2: only the job's
    first file given up stopped anything, and attempt 2 ran on with logs missing lines."""

    def gap(problem: str) -> bytes:
        return f"missing: {problem}\n".encode()

    def work() -> list[Any]:
        log_dir = LogDir(str(tmp_path))
        log_dir.open(["rank-0.log", "controller.log"])
        said: list[Any] = []
        for attempt, name in enumerate(["controller.log", "rank-0.attempt-2.log"]):
            try:
                log_dir.write(name, b"x" * 5000)
            except OutputLost as stop:
                said.append(stop.reason)
            if attempt == 0:
                try:
                    log_dir.resume(gap)
                except UsageError as refused:
                    said.append(str(refused))
                resource.setrlimit(resource.RLIMIT_FSIZE, (8192, resource.RLIM_INFINITY))
                said.append(log_dir.resume(gap))
                resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
        log_dir.close()
        return said

    said = _in_a_child_limited_to(4096, work)
    too_large = f"cannot write {tmp_path}/%s (File too large)"
    assert said == [
        too_large % "controller.log",
        f"--log-dir {tmp_path}: controller.log still cannot be written (File too large)",
        [f"{tmp_path}/controller.log"],
        too_large % "rank-0.attempt-2.log",
    ]
    logged = (tmp_path / "controller.log").read_bytes()
    assert logged == b"x" * 4096 + b"\n" + gap(too_large % "controller.log")


class _ReaderGone(io.RawIOBase):
    """A console stream whose reader went away (``| head``): every write fails."""

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_console_that_fails_mid_read_leaves_every_frame_in_the_files(tmp_path: Path) -> None:
    """stdout's reader goes at the first frame of a read: its stop went out of the read
    loop at once, and the read's later frames reached no file."""
    agent = FakeAgent(
        [started(), rank_output(0, b"first\n"), rank_output(1, b"second\n"),
         rank_output(0, b"third\n"), Hang()],
        on={"t": [stopping("requested"), rank_output(1, b"bye\n"), *exits(-15, "requested")]},
    )  # fmt: skip
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    err = io.BytesIO()
    ranks = [(0, "a", 0), (1, "a", 1)]
    console = Console(io.BufferedWriter(_ReaderGone()), err)
    router = OutputRouter(Prefixes(ranks, ["a"], False), console, log_dir=log_dir)
    plan = two_ranks_per_host(["a"])
    outcome = Supervisor(plan, {"a": FakeConnection("a", agent)}, router).run()
    log_dir.close()
    assert (outcome.exit_code, outcome.reason) == (141, "stdout was closed (broken pipe)")
    assert (tmp_path / "rank-0.log").read_bytes() == b"first\nthird\n"
    assert (tmp_path / "rank-1.log").read_bytes() == b"second\nbye\n"
    assert err.getvalue() == b""  # the ranks wrote nothing on stderr


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_closing_an_attempts_files_leaves_the_others_open(tmp_path: Path) -> None:
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "rank-1.log", "controller.log"])
    log_dir.write("rank-0.log", b"attempt 1\n")
    before = _open_descriptors()
    log_dir.close_files(["rank-0.log", "rank-1.log"])
    assert _open_descriptors() == before - 2
    log_dir.write("rank-0.attempt-2.log", b"attempt 2\n")
    log_dir.write("controller.log", b"still open\n")
    log_dir.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "controller.log", "rank-0.attempt-2.log", "rank-0.log",  # rank-1's stayed empty
    ]  # fmt: skip
    assert (tmp_path / "rank-0.log").read_bytes() == b"attempt 1\n"


@contextmanager
def _umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _one_job(path: Path) -> None:
    log_dir = LogDir(str(path))
    log_dir.open(["rank-0.log"])
    log_dir.write("rank-0.log", b"x")
    log_dir.close()


@pytest.mark.parametrize(("mask", "dirs", "files"), [(0o000, 0o755, 0o644), (0o027, 0o750, 0o640)])
def test_what_is_created_is_never_group_or_other_writable(
    tmp_path: Path, mask: int, dirs: int, files: int
) -> None:
    """Under umask 000 the directory it had just made (0777) was refused as writable by
    everyone, and stayed so; the umask may still take more away."""
    logs = tmp_path / "lu" / "new"
    with _umask(mask):
        _one_job(logs)
        _one_job(logs / "again")  # not refused either, inside the first
    assert [_mode(p) for p in (tmp_path / "lu", logs, logs / "again")] == [dirs] * 3
    assert _mode(logs / "rank-0.log") == _mode(logs / "again" / "rank-0.log") == files


def test_files_in_a_shared_sticky_directory_are_not_writable_by_others(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    with _umask(0):
        _one_job(shared)
    assert _mode(shared / "rank-0.log") == 0o644
    assert _mode(shared) == 0o1777  # not ours to change
