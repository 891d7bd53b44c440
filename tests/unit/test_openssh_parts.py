"""The OpenSSH transport's local parts: its private directory, and a session without a master."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterlaunch.core import commands
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.controldir import ControlDir
from clusterlaunch.transport.openssh import OpenSshConnection


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


def test_a_jump_chain_nests_each_later_hop_inside_the_shared_first_one(tmp_path: Path) -> None:
    """ProxyJump a,b: the master to a is shared; b's ssh runs inside the target's ProxyCommand,
    with its own ProxyCommand (through a's socket) %-escaped once, for b's ssh to expand."""
    import shlex

    from clusterlaunch.core.sshargv import Keepalive
    from clusterlaunch.transport import sshmaster

    config = tmp_path / "config"
    config.write_text("Host t1 t2\n    ProxyJump a,b\nHost a b t1 t2\n    User u\n")
    settings = sshmaster.MasterSettings(str(config), 5.0, Keepalive(1, 6), "strict", str(config))
    targets = [SshTarget(alias=t, hostname=t, proxy_jump="a,b", user="u") for t in ("t1", "t2")]
    control = ControlDir(str(tmp_path))
    masters = sshmaster._plan(targets, settings, control)
    jump, first, second = masters
    assert jump.key == "a" and first.jump is jump and second.jump is jump  # one master to a
    assert [hop.alias for hop in first.hops] == ["b"]
    argv = sshmaster._argv(first, settings, sshmaster.Mux("sock"))
    proxy = argv[argv.index(next(w for w in argv if w.startswith("ProxyCommand=")))]
    outer = shlex.split(proxy.removeprefix("ProxyCommand="))
    assert outer[-4:] == ["-W", "[%h]:%p", "--", "b"]  # the target's ssh expands this
    inner = next(w for w in outer if w.startswith("ProxyCommand=")).removeprefix("ProxyCommand=")
    # Escaped once: the outer ssh turns [%%h]:%%p back into [%h]:%p for b's ssh.
    assert shlex.split(inner)[-4:] == ["-W", "[%%h]:%%p", "--", "a"]
    assert f"ControlPath={jump.socket}" in inner
    control.release()


def _fake_ssh(tmp_path: Path) -> Path:
    """An "ssh" off PATH that prints its path and arguments."""
    program = tmp_path / "bin" / "fake-ssh"
    program.parent.mkdir()
    program.write_text('#!/bin/sh\necho "$0" "$@"\n')
    program.chmod(0o755)
    return program


def test_a_session_runs_the_client_that_was_looked_up_with_ssh_as_its_name(
    tmp_path: Path,
) -> None:
    """Popen is given the path (no PATH search per spawn): a client off PATH runs."""
    program = _fake_ssh(tmp_path)
    master = subprocess.Popen(["sleep", "30"])
    connection = OpenSshConnection("n0", master, ["ssh", "-x"], lambda: None, ssh=str(program))
    process = connection.start("true")
    out = b""
    while not process.finished():
        out += process.read()[0]
    line = commands.for_login_shell("true")[0]  # the command itself goes on stdin
    assert out.decode().split() == [str(program), "-x", "--", "n0", *line.split()]
    connection.close()
    master.kill()
    master.wait()


def test_a_master_runs_the_client_that_was_looked_up_where_setpriv_is_not_used(
    tmp_path: Path,
) -> None:
    from clusterlaunch.core.sshargv import Keepalive
    from clusterlaunch.transport import sshmaster

    program = _fake_ssh(tmp_path)
    config = tmp_path / "config"
    config.write_text("")
    settings = sshmaster.MasterSettings(
        str(config), 5.0, Keepalive(1, 6), "strict", str(config), ssh=str(program)
    )
    control = ControlDir(str(tmp_path))
    (master,) = sshmaster._plan([SshTarget(alias="t1", hostname="t1")], settings, control)
    sshmaster._spawn(master, settings)
    assert master.popen is not None and master.log is not None
    assert master.popen.wait() == 0  # the fake ran: the real ssh would fail to reach t1
    assert master.popen.args[0] == "ssh"  # type: ignore[index]  # its name, as ps shows it
    master.log.close()
    control.release()


def test_a_master_up_since_the_look_is_not_failed_for_a_deadline_that_passed_after_it(
    tmp_path: Path,
) -> None:
    """The controller stopped (Ctrl-Z) between a look and the judgement of its masters: the
    master came up meanwhile and its deadline passed. Judged by the time of the look, it is
    no failure; the next look finds it up. Judged by the clock, it was killed as too slow."""
    from clusterlaunch.core.sshargv import Keepalive
    from clusterlaunch.transport import sshmaster
    from clusterlaunch.transport.sshready import Arrivals

    settings = sshmaster.MasterSettings(None, 5.0, Keepalive(1, 6), "strict", None)
    control = ControlDir(str(tmp_path))
    (master,) = sshmaster._plan([SshTarget(alias="t1", hostname="t1")], settings, control)
    master.popen = subprocess.Popen(["sleep", "30"])  # a master: it runs on once up
    arrivals = Arrivals(control.path)
    try:
        arrivals.look()  # not up yet; then we are stopped, and meanwhile:
        master.deadline = time.monotonic()
        Path(master.socket).touch()  # it came up, and its deadline passed
        while time.monotonic() <= master.deadline:
            pass
        assert not sshmaster._settled(master, settings, lambda line: None, arrivals)
        assert master.error is None and master.popen.poll() is None
        arrivals.look()  # the loop's next round
        assert sshmaster._settled(master, settings, lambda line: None, arrivals)
        assert master.ready and master.error is None
        master.up = False  # once more, not up: a look after its deadline fails it
        Path(master.socket).unlink()
        master.deadline = time.monotonic()
        arrivals.look()
        assert sshmaster._settled(master, settings, lambda line: None, arrivals)
        assert master.error is not None and "no SSH session with t1:22 within 15 s" in str(
            master.error.detail
        )
    finally:
        master.popen.kill()
        master.popen.wait()
        control.release()
