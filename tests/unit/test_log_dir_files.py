"""``--log-dir``'s files under hostile settings: what is created is never writable by group
or others, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clusterlaunch.controller.logdir import LogDir


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
