"""Home as ssh takes it: the password database's, whatever ``$HOME`` says.

``ssh`` itself is the ground truth: each test runs ``ssh -G`` with ``HOME`` moved
to a directory holding a config of its own, and compares.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import identities, sshconfig, sshtokens
from clusterlaunch.transport.sshresolve import parse_options
from clusterlaunch.transport.sshtokens import ssh_home, tilde

PASSWD_HOME = pwd.getpwuid(os.getuid()).pw_dir


@pytest.fixture
def moved_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HOME`` pointing elsewhere (``sudo -E``, a job script's export), with a config."""
    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    home = tmp_path / "moved"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host n0\n    HostName 10.9.9.9\n")
    monkeypatch.setenv("HOME", str(home))
    assert os.path.expanduser("~") == str(home) != PASSWD_HOME
    return home


def _ssh_G(host: str, config: Path | None = None) -> dict:
    argv = ["ssh", "-G", *(["-F", str(config)] if config else []), host]
    return parse_options(subprocess.run(argv, capture_output=True, text=True).stdout)


def test_tilde_and_percent_d_are_the_password_databases_home(
    moved_home: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.write_text("Host n0\n    HostName 10.0.0.1\n    UserKnownHostsFile ~/kh %d/kh2\n")
    target = sshconfig.resolve_targets(str(config), [HostSpec(host="n0", gpus=1)])[0]
    said = _ssh_G("n0", config)["userknownhostsfile"]
    assert " ".join(target.known_hosts_files) == said == f"{PASSWD_HOME}/kh {PASSWD_HOME}/kh2"
    assert ssh_home() == PASSWD_HOME
    assert tilde("~/.ssh/id_ed25519") == f"{PASSWD_HOME}/.ssh/id_ed25519"
    assert tilde("~root/x") == f"{pwd.getpwnam('root').pw_dir}/x"
    assert tilde("/abs/~x") == "/abs/~x"


def test_the_default_config_is_not_moved_by_home(moved_home: Path) -> None:
    # ssh reads the password database's ~/.ssh/config; the moved one names n0 10.9.9.9.
    assert sshconfig.config_path(None) == f"{PASSWD_HOME}/.ssh/config"
    assert sshconfig.ssh_config_file(None) != str(moved_home / ".ssh" / "config")
    target = sshconfig.resolve_targets(None, [HostSpec(host="n0", gpus=1)])[0]
    assert target.hostname == _ssh_G("n0")["hostname"] != "10.9.9.9"
    # A file named on the command line is that file, as -F names it.
    named = str(moved_home / ".ssh" / "config")
    assert (
        sshconfig.resolve_targets(named, [HostSpec(host="n0", gpus=1)])[0].hostname
        == (_ssh_G("n0", Path(named))["hostname"])
    )


def test_keys_offered_are_the_ones_ssh_offers(
    moved_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ssh's home here is a folder of this test's (ssh_home is the password database's).
    real_home = tmp_path / "real"
    (real_home / ".ssh").mkdir(parents=True)
    for name in ("id_ed25519", "id_rsa", "id_ecdsa_sk"):
        (real_home / ".ssh" / name).write_text("a key\n")
        (moved_home / ".ssh" / name).write_text("the moved home's key\n")
    monkeypatch.setattr(identities, "ssh_home", lambda: str(real_home))
    config = tmp_path / "config"
    (tmp_path / "only").write_text("a key\n")
    missing = f"    IdentityFile {tmp_path}/not_here\n"  # ssh skips it when it connects
    config.write_text(
        f"Host named\n    IdentityFile {tmp_path}/only\n{missing}Host *\n    User u\n"
    )
    named, plain = sshconfig.resolve_targets(
        str(config), [HostSpec(host="named", gpus=1), HostSpec(host="plain", gpus=1)]
    )
    # A configured IdentityFile is all ssh offers: no default joins it.
    assert _identities_of("named", config) == [f"{tmp_path}/only", f"{tmp_path}/not_here"]
    assert identities.identity_files(named) == [f"{tmp_path}/only"]
    # None configured: ssh's defaults, in its order, those that exist (and paramiko reads).
    defaults = [Path(p).name for p in _identities_of("plain", config)]
    assert defaults[:4] == ["id_rsa", "id_ecdsa", "id_ecdsa_sk", "id_ed25519"]
    assert identities.identity_files(plain) == [
        str(real_home / ".ssh" / "id_rsa"),
        str(real_home / ".ssh" / "id_ed25519"),
    ]


def test_identity_file_none_names_no_file_and_keeps_the_defaults_out(
    moved_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``IdentityFile none``: ssh offers no file's key (ssh.c skips the word) and adds no
    default, so only the agent's keys; a file called ``none`` here was read as a key."""
    real_home = tmp_path / "real"
    (real_home / ".ssh").mkdir(parents=True)
    (real_home / ".ssh" / "id_ed25519").write_text("a key\n")
    monkeypatch.setattr(identities, "ssh_home", lambda: str(real_home))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "none").write_text("not a key\n")
    config = tmp_path / "config"
    config.write_text("Host nokey\n    IdentityFile none\n")
    [target] = sshconfig.resolve_targets(str(config), [HostSpec(host="nokey", gpus=1)])
    assert _identities_of("nokey", config) == ["none"]  # no default joins it
    assert identities.identity_files(target) == []


def _identities_of(host: str, config: Path) -> list[str]:
    argv = ["ssh", "-G", "-F", str(config), host]
    lines = subprocess.run(argv, capture_output=True, text=True).stdout.splitlines()
    return [line.split(" ", 1)[1] for line in lines if line.startswith("identityfile ")]


def test_a_home_of_root_gives_single_slashes(monkeypatch: pytest.MonkeyPatch) -> None:
    # ssh's tilde_expand adds no "/" after a home that ends in one.
    monkeypatch.setattr(sshtokens, "ssh_home", lambda: "/")
    assert sshtokens.tilde("~/.ssh/config") == "/.ssh/config"
    assert sshtokens.tilde("~") == "/"


def test_global_known_hosts_files_expand_a_tilde_and_no_token(tmp_path: Path) -> None:
    # ssh -vvv (OpenSSH 9.2) for "GlobalKnownHostsFile ~/g /tmp/gk_%h": "fopen /root/g",
    # "fopen /tmp/gk_%h". Without the keyword: ssh's two files under /etc/ssh.
    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    config = tmp_path / "config"
    config.write_text("Host n0\n    GlobalKnownHostsFile ~/g /tmp/gk_%h\n")
    named, plain = sshconfig.resolve_targets(
        str(config), [HostSpec(host="n0", gpus=1), HostSpec(host="n1", gpus=1)]
    )
    assert named.global_known_hosts_files == (f"{PASSWD_HOME}/g", "/tmp/gk_%h")
    assert plain.global_known_hosts_files == (
        "/etc/ssh/ssh_known_hosts",
        "/etc/ssh/ssh_known_hosts2",
    )
    said = subprocess.run(["ssh", "-G", "-F", str(config), "n1"], capture_output=True, text=True)
    assert f"globalknownhostsfile {' '.join(plain.global_known_hosts_files)}" in said.stdout
