"""Comments at the end of SSH config lines, read as ssh reads them (``ssh -G`` is the
ground truth): a ``#`` that starts a word outside quotes ends the line, except in a
command (``ProxyCommand``), which ssh runs as written. paramiko kept them:
``Host node1 # was node0`` matched node0 too (a wrong host), ``User alice # me``
logged in as "alice # me", and ``Port 22 # c`` was refused."""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.transport import sshconfig, sshresolve, sshtarget

CONFIG = """\
Host node1 # was also node0 before the move
    HostName 10.0.0.13
Host node0  # the first
    HostName 10.0.0.12 # fabric address
    User alice # me
    Port 2222\t#c
    IdentityFile "/keys/a #b" # quoted, then a comment
    IdentityFile /keys/c#d
    SendEnv FOO #BAR
    SetEnv A="x #y" #z
    ProxyCommand nc %h %p # ssh runs this as written
    StrictHostKeyChecking yes # strict
Host a#b
    User hashed
"""


def _fields(target: SshTarget) -> tuple[object, ...]:
    """What ``ssh -G`` shows as clusterlaunch keeps it (identity files: below; ssh -G
    leaves out files that do not exist, and its user is the local one when unset)."""
    return (
        target.hostname, target.user or getpass.getuser(), target.port,
        target.proxy_command, target.send_env, target.set_env, target.key_policy(None),
    )  # fmt: skip


def _same_as_ssh(tmp_path: Path, text: str, alias: str) -> SshTarget:
    """``alias`` resolved through ``text`` here and by ``ssh -G``: the same; ours."""
    config = tmp_path / "config"
    config.write_text(text)
    spec = HostSpec(host=alias, gpus=1)
    shown = subprocess.run(["ssh", "-G", "-F", str(config), alias], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    by_ssh = sshtarget.target_from(sshresolve.parse_options(shown.stdout), spec)
    [ours] = sshconfig.resolve_targets(str(config), [spec])
    assert _fields(ours) == _fields(by_ssh)
    return ours


@pytest.mark.parametrize("alias", ["node0", "node1", "a#b", "was"])
def test_trailing_comments_are_read_as_ssh_reads_them(tmp_path: Path, alias: str) -> None:
    _same_as_ssh(tmp_path, CONFIG, alias)


def test_what_the_comments_would_have_changed(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(CONFIG)
    node0, node1 = sshconfig.resolve_targets(
        str(config), [HostSpec(host="node0", gpus=1), HostSpec(host="node1", gpus=1)]
    )
    assert (node0.hostname, node0.user, node0.port) == ("10.0.0.12", "alice", 2222)
    assert node0.identity_files[:2] == ("/keys/a #b", "/keys/c#d")
    assert node0.proxy_command == "nc 10.0.0.12 2222 # ssh runs this as written"
    assert node1.hostname == "10.0.0.13"


QUOTED = """\
Host node0
    HostName 10.0.0.2"1"
    User 'alice'
    Port '2222'
    IdentityFile "/keys/with space"
    UserKnownHostsFile "/kh/first" '/kh/my second' /kh/third
    GlobalKnownHostsFile "/kh/g lobal"
Host node1
    HostName "10.0.0.22"
    UserKnownHostsFile none
    GlobalKnownHostsFile none
"""


@pytest.mark.parametrize("alias", ["node0", "node1"])
def test_quoted_values_are_read_as_ssh_reads_them(tmp_path: Path, alias: str) -> None:
    """ssh removes quotes around (and inside) a word; paramiko kept them or, for a
    whole value in double quotes, half of them (``"a" "b"`` was one name)."""
    ours = _same_as_ssh(tmp_path, QUOTED, alias)
    if alias == "node0":
        assert ours.known_hosts_files == ("/kh/first", "/kh/my second", "/kh/third")
        assert ours.global_known_hosts_files == ("/kh/g lobal",)
        assert ours.identity_files[0] == "/keys/with space"
    else:
        assert ours.known_hosts_files == () and ours.global_known_hosts_files == ()


def test_none_with_other_files_is_refused_as_ssh_refuses_it(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host node0\n    UserKnownHostsFile none /kh/other\n")
    with pytest.raises(UsageError, match="UserKnownHostsFile: none appears with other entries"):
        sshconfig.resolve_targets(str(config), [HostSpec(host="node0", gpus=1)])
