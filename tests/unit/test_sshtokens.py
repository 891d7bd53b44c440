"""IdentityFile paths expanded as ssh expands them (ssh_config(5), OpenSSH's percent.sh)."""

from __future__ import annotations

import hashlib
import os
import pwd
from unittest import mock

import pytest

from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport.sshconfig import resolve_target
from clusterlaunch.transport.sshlookup import IndexedSshConfig
from clusterlaunch.transport.sshtokens import Connection, ssh_path

HOST = Connection("node7", "10.0.0.7", 2222, "alice", key_alias=None, jump=None)
LOCAL_USER = pwd.getpwuid(os.getuid()).pw_name
HOME = pwd.getpwuid(os.getuid()).pw_dir  # ssh's ~ and %d (sshtokens.ssh_home)


@pytest.fixture(autouse=True)
def local_host():
    """gethostname as ssh asks it; the DNS is never asked."""
    with (
        mock.patch("socket.gethostname", return_value="login1.cluster.org"),
        mock.patch("socket.getfqdn", side_effect=AssertionError("a DNS look-up")),
    ):
        yield


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("~/.ssh/id_%h", f"{HOME}/.ssh/id_10.0.0.7"),
        ("%d/.ssh/id_%r@%h:%p", f"{HOME}/.ssh/id_alice@10.0.0.7:2222"),
        ("/keys/%n/%k", "/keys/node7/node7"),  # %k: HostKeyAlias, else the alias
        ("/keys/%l/%L", "/keys/login1.cluster.org/login1"),  # gethostname, whole and short
        ("/keys/%u-%i", f"/keys/{LOCAL_USER}-{os.getuid()}"),
        ("/keys/100%%/%%h", "/keys/100%/%h"),  # "%%" is one "%", and starts no token
        ("/keys/~odd/x~", "/keys/~odd/x~"),  # "~" only at the start (paramiko: anywhere)
        ("/keys/$HOME/${CL_TEST_KEY}", "/keys/$HOME/chosen"),  # ${VAR} only
    ],
)
def test_tokens_as_ssh_expands_them(written: str, expected: str) -> None:
    with mock.patch.dict(os.environ, {"CL_TEST_KEY": "chosen"}):
        assert ssh_path(written, HOST) == (expected, None)


def test_percent_c_is_ssh_connection_hash() -> None:
    # ssh_connection_hash: SHA-1 of %l%h%p%r, the local host name whole.
    joined = "login1.cluster.org" + "10.0.0.7" + "2222" + "alice"
    expected = "/cm/" + hashlib.sha1(joined.encode()).hexdigest()
    assert ssh_path("/cm/%C", HOST) == (expected, None)


def test_the_host_name_is_lowercased_and_the_alias_is_not() -> None:
    # ssh -v with HostName MiXeD.Example for alias NoDe0: "k_mixed.example_NoDe0_NoDe0".
    mixed = Connection("NoDe0", "MiXeD.Example", 22, "u")
    assert ssh_path("/k_%h_%n_%k", mixed) == ("/k_mixed.example_NoDe0_NoDe0", None)
    lower = Connection("NoDe0", "mixed.example", 22, "u")
    assert ssh_path("%C", mixed) == ssh_path("%C", lower)


def test_the_remote_user_defaults_to_the_local_one() -> None:
    nobody = Connection("n", "n", 22, None)
    assert ssh_path("/k/%r", nobody) == (f"/k/{LOCAL_USER}", None)


@pytest.mark.parametrize(
    ("written", "connection", "why"),
    [
        ("/k/%C", Connection("a", "a", 22, "u", jump="bastion"), "differs between OpenSSH"),
        ("/k/%j", HOST, "%j is unknown to OpenSSH 9.2"),  # and later ones know it
        ("/k/%x", HOST, "%x is no token of ssh_config(5) for paths"),
        ("/k/%", HOST, "% is no token of ssh_config(5) for paths"),
        ("/k/${CL_TEST_UNSET}", HOST, "${CL_TEST_UNSET} is not set"),
        ("/k/${OPEN", HOST, "an unclosed ${"),
    ],
)
def test_what_cannot_be_expanded_as_every_ssh_does_is_left_as_written(
    written: str, connection: Connection, why: str
) -> None:
    os.environ.pop("CL_TEST_UNSET", None)
    path, reason = ssh_path(written, connection)
    assert path == written and reason is not None and why in reason


def test_the_hosts_file_user_and_port_win_as_ssh_l_and_p_do() -> None:
    config = IndexedSshConfig.from_text(
        "Host node*\n    HostName %h.lan\n    User cfg\n    Port 2200\n"
        "    IdentityFile ~/.ssh/%r@%h:%p\n    IdentityFile ~/.ssh/k_%n\n"
        "    UserKnownHostsFile ~/.ssh/kh_%h_%p /etc/kh_%n\n"
    )
    target = resolve_target(config, HostSpec(host="node3", gpus=1, user="bob", port=2299))
    assert target.identity_files == (f"{HOME}/.ssh/bob@node3.lan:2299", f"{HOME}/.ssh/k_node3")
    assert target.known_hosts_files == (f"{HOME}/.ssh/kh_node3.lan_2299", "/etc/kh_node3")
    plain = resolve_target(config, HostSpec(host="node3", gpus=1))
    assert plain.identity_files == (f"{HOME}/.ssh/cfg@node3.lan:2200", f"{HOME}/.ssh/k_node3")


HOST_NAMES = [
    ("Host ll\n  HostName fe80::1%%e6t0\n", "ll"),  # ssh: fe80::1%e6t0
    ("Host l2\n  HostName fe80::1%h6br\n", "l2"),  # %h: the name given
    ("Host l5\n  HostName a%%h%h.Example\n", "l5"),
    ("Host *\n  User u\n", "fe80::1%h6br"),  # a name given: never expanded (hsn0, Slingshot's)
    ("Host *\n  User u\n", "fe80::1%%e6t0"),
    ("Host l3\n  HostName fe80::1%e6t0\n", "l3"),  # ssh: "percent_expand: unknown key %e"
    ("Host l4\n  HostName fe80::1%\n", "l4"),  # ssh: "percent_expand: invalid format"
]


@pytest.mark.parametrize(("text", "host"), HOST_NAMES)
def test_a_host_name_is_expanded_as_ssh_expands_it(tmp_path, text: str, host: str) -> None:
    """paramiko expanded %h in a name given too (fe80::1%h6br: another host) and left %%."""
    from clusterlaunch.core.errors import UsageError
    from clusterlaunch.transport.sshconfig import resolve_targets
    from tests.unit.sshtruth import ssh_g

    config = tmp_path / "config"
    config.write_text(text)
    truth = ssh_g(config, host)
    if truth.returncode != 0:
        with pytest.raises(UsageError) as refused:
            resolve_targets(str(config), [HostSpec(host=host, gpus=1)])
        assert str(refused.value).startswith(f"{config}:2, host {host}: HostName "), refused.value
        assert str(refused.value).endswith("write %% for a '%'"), refused.value
        return
    expected = next(line.split()[1] for line in truth.stdout.splitlines() if "hostname " in line)
    [target] = resolve_targets(str(config), [HostSpec(host=host, gpus=1)])
    assert target.hostname.lower() == expected.lower()  # ssh lowercases some of it
