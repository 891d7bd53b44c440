"""An ssh master's stderr in a file without a name: what the master wrote is read back whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.transport import sshlog
from clusterlaunch.transport.sshlog import MasterLog

WRITER = (
    "import sys; sys.stderr.write('x' * 70000 + '\\nkex_exchange_identification: read: reset\\n')"
)


def test_what_a_child_wrote_on_stderr_is_read_back_whole() -> None:
    log = MasterLog()
    try:
        subprocess.run([sys.executable, "-c", WRITER], stderr=log.fileno(), check=True)
        said = log.said()
        assert said.endswith("\nkex_exchange_identification: read: reset\n")
        assert len(said) == 70000 + 42  # past one pread chunk
        assert log.said() == said  # reading moves nothing
    finally:
        log.close()


def test_reading_leaves_the_writer_s_offset_alone() -> None:
    log = MasterLog()
    try:
        os.write(log.fileno(), b"first\n")  # as the master writes: through the shared offset
        assert log.said() == "first\n"
        os.write(log.fileno(), b"second\n")
        assert log.said() == "first\nsecond\n"
    finally:
        log.close()


def test_a_closed_log_says_nothing_and_closes_once() -> None:
    log = MasterLog()
    fd = log.fileno()
    log.close()
    log.close()
    assert log.said() == ""
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError, match="closed"):
        log.fileno()


def test_it_leaves_no_file_behind_without_memfd(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(sshlog.tempfile, "tempdir", str(tmp_path))
    log = MasterLog()
    try:
        os.write(log.fileno(), b"said\n")
        assert log.said() == "said\n"
        assert list(tmp_path.iterdir()) == []  # unlinked at once: nothing to clean up
    finally:
        log.close()
