"""The OpenSSH transport's local parts: its private directory, and a session without a master."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.core.errors import TransportError
from clusterlaunch.transport.openssh import ControlDir, OpenSshConnection


def test_control_dir_is_private_and_removed_by_its_last_user(tmp_path: Path) -> None:
    control = ControlDir(str(tmp_path))
    assert Path(control.path).parent == tmp_path
    assert stat.S_IMODE(os.stat(control.path).st_mode) == 0o700
    control.hold()
    control.hold()
    control.release()
    assert os.path.isdir(control.path)
    control.release()
    assert not os.path.exists(control.path)


def test_directories_of_killed_controllers_are_swept(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"clusterlaunch-ssh-{dead.pid}-abc"
    left.mkdir()
    (left / "0.log").write_text("")
    mine = tmp_path / f"clusterlaunch-ssh-{os.getpid()}-xyz"
    mine.mkdir()
    ControlDir(str(tmp_path))
    assert not left.exists() and mine.exists()


def test_no_session_once_the_master_is_gone() -> None:
    master = subprocess.Popen(["true"])
    master.wait()
    closed = []
    connection = OpenSshConnection("n0", master, ["ssh"], lambda: closed.append(1))
    assert not connection.alive()
    with pytest.raises(TransportError, match="connection closed"):
        connection.start("true")  # ssh would quietly open a connection of its own
    connection.close()
    connection.close()
    assert closed == [1]
