"""How many times ssh reads its config, under which name, and which of two exclusive
settings wins, read as ssh reads them (``ssh -G`` is the ground truth).

paramiko read every config twice under the name given. ssh reads it a second time
only for a ``Match final`` (Fedora's and RHEL's system file has ``Match final all``)
or canonicalization, and then matches ``Host`` patterns against the host name the
first pass resolved. ``user:`` in the hosts file is ssh's ``-l``: ``Match user``
sees it. Of ``ProxyJump`` and ``ProxyCommand`` the first applying line wins. ``Match host``
and ``originalhost`` patterns match in any case.
"""

from __future__ import annotations

import getpass
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.transport import sshconfig, sshresolve, sshtarget

CASES = {
    "Match host before its HostName, no second pass": (
        "Match host 10.0.0.11\n  User alice\nHost node0\n  HostName 10.0.0.11\n",
        "node0",
    ),
    "Match final: Host patterns see the HostName": (
        "Host node0\n  HostName 10.0.0.12\nHost 10.0.0.*\n  User alice\n"
        "Match final all\n  ServerAliveInterval 30\n",
        "node0",
    ),
    "Match final: Match canonical matches too": (
        "Match final all\n  Port 2201\nMatch canonical\n  User canon\n"
        "Host n0\n  HostName 10.1.2.3\n",
        "n0",
    ),
    "Match final: %h expanded and lowercased": (
        "Host N0\n  HostName %h.Example.COM\nMatch final\n  Port 2203\n"
        "Host n0.example.com\n  User low\n",
        "N0",
    ),
    "Match originalhost in capitals": (
        "Match originalhost NODE0\n  Port 2272\nHost node0\n  HostName 10.0.0.21\n  Port 2271\n",
        "node0",
    ),
    "Match host in mixed case": (
        "Match host NoDe*\n  User mixed\nHost node0\n  Port 2271\n",
        "node0",
    ),
    "Port as a service name": ("Host n0\n  Port ssh\n", "n0"),
    "ProxyCommand first": ("Host n0\n  ProxyCommand nc x %p\nHost *\n  ProxyJump j1\n", "n0"),
    "ProxyCommand none first": ("Host n0\n  ProxyCommand none\nHost *\n  ProxyJump j1\n", "n0"),
    "ProxyJump first": ("Host n0\n  ProxyJump j2\nHost *\n  ProxyCommand nc y %p\n", "n0"),
    "ProxyJump none, then a ProxyCommand": (
        "Host n0\n  ProxyJump none\nHost *\n  ProxyCommand nc z %p\n",
        "n0",
    ),
    "ProxyJump none, then a ProxyJump": (
        "Host n0\n  ProxyJump none\nHost *\n  ProxyJump j1\n",
        "n0",
    ),
    "ProxyJump as an ssh:// URI": ("Host n0\n  ProxyJump ssh://u@j3:2200\n", "n0"),
}


def _fields(target: SshTarget) -> tuple[object, ...]:
    return (
        target.hostname, target.user or getpass.getuser(), target.port,
        target.proxy_jump, target.proxy_command is not None,
    )  # fmt: skip


def _by_ssh(config: Path, spec: HostSpec) -> SshTarget:
    user = ["-l", spec.user] if spec.user else []
    argv = ["ssh", "-G", "-F", str(config), *user, spec.host]
    shown = subprocess.run(argv, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    return sshtarget.target_from(sshresolve.parse_options(shown.stdout), spec)


@pytest.mark.parametrize("case", CASES)
def test_a_config_is_read_in_the_passes_ssh_reads_it_in(tmp_path: Path, case: str) -> None:
    text, alias = CASES[case]
    config = tmp_path / "config"
    config.write_text(text)
    spec = HostSpec(host=alias, gpus=1)
    [ours] = sshconfig.resolve_targets(str(config), [spec])
    assert _fields(ours) == _fields(_by_ssh(config, spec))


def test_the_cases_differ_where_paramiko_read_them_otherwise(tmp_path: Path) -> None:
    found = {}
    for case, (text, alias) in CASES.items():
        config = tmp_path / f"config{len(found)}"
        config.write_text(text)
        [found[case]] = sshconfig.resolve_targets(str(config), [HostSpec(host=alias, gpus=1)])
    assert found["Match host before its HostName, no second pass"].user is None
    assert found["Match final: Host patterns see the HostName"].user == "alice"
    assert found["Match final: Match canonical matches too"].user == "canon"
    assert found["Match final: %h expanded and lowercased"].user == "low"
    assert found["Match originalhost in capitals"].port == 2272
    assert found["Match host in mixed case"].user == "mixed"
    assert found["ProxyCommand none first"].proxy_jump is None
    assert found["ProxyCommand first"].proxy_jump is None
    assert found["ProxyJump as an ssh:// URI"].proxy_jump == "u@j3:2200"


@pytest.mark.parametrize("user", ["alice", None])
def test_the_hosts_file_user_is_what_match_user_sees(tmp_path: Path, user: str | None) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Match user alice\n  Port 2250\nHost node0\n  HostName 10.0.0.11\n  Port 2240\n"
    )
    spec = HostSpec(host="node0", gpus=1, user=user)
    [ours] = sshconfig.resolve_targets(str(config), [spec])
    assert _fields(ours) == _fields(_by_ssh(config, spec))
    assert ours.port == (2250 if user == "alice" else 2240)


@pytest.mark.parametrize(
    ("hop", "split"),
    [
        ("j1", (None, "j1", None)),
        ("u@j1:2200", ("u", "j1", 2200)),
        ("ssh://u@j1:2200", ("u", "j1", 2200)),
        ("ssh://j1", (None, "j1", None)),
        ("u@[fe80::1]:22", ("u", "fe80::1", 22)),
    ],
)
def test_a_jump_hop_is_split_as_ssh_splits_it(
    hop: str, split: tuple[str | None, str, int | None]
) -> None:
    assert sshtarget.split_hop(hop) == split


@pytest.mark.parametrize("hop", ["j1:port", "j1:0", "u@"])
def test_a_hop_ssh_refuses_is_one_line(hop: str) -> None:
    with pytest.raises(UsageError, match="ProxyJump"):
        sshtarget.split_hop(hop)


# What ssh's parse_jump (readconf.c, with misc.c's parse_uri) takes: an ssh:// URI's host
# must be a domain name (valid_domain), so no IPv6 address, bracketed or not; the plain
# form takes one in brackets. paramiko went through "ssh://root@[fd42:6::10]:22".
HOPS = [
    "ssh://root@[fd42:6::10]:22", "ssh://[::1]", "ssh://[fe80::1%eth0]:22", "ssh://fd42:6::10",
    "[fd42:6::10]:22", "root@[::1]:23010", "fd42:6::10",
    "ssh://u@j1:2200", "ssh://j1/", "ssh://[j1]:22", "ssh://j1.", "ssh://1.2.3.4", "ssh://a_b",
    "ssh://-j1", "ssh://_j1", "ssh://a..b", "ssh://j1/path", "ssh://@j1", "SSH://j1",
    "ssh://a;x=y@j1", "ssh://a%40b@j1", "ssh://a%4@j1", "ssh://j1:ssh", "j1:ssh", "ssh://j1:0",
]  # fmt: skip


@pytest.mark.parametrize("hop", HOPS)
def test_a_jump_hop_is_refused_where_ssh_refuses_it(tmp_path: Path, hop: str) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host j4\n  HostName 10.9.9.9\n  ProxyJump {hop}\n")
    truth = subprocess.run(["ssh", "-G", "-F", str(config), "j4"], capture_output=True, text=True)
    spec = HostSpec(host="j4", gpus=1)
    if truth.returncode != 0:
        assert "Invalid ProxyJump" in truth.stderr, truth.stderr
        with pytest.raises(UsageError) as refused:
            sshconfig.resolve_targets(str(config), [spec])
        assert f"ProxyJump {hop!r}: ssh refuses" in str(refused.value), refused.value
        return
    [target] = sshconfig.resolve_targets(str(config), [spec])
    assert target.proxy_jump is not None
    by_ssh = next(line.split()[1] for line in truth.stdout.splitlines() if "proxyjump " in line)
    ours = sshtarget.split_hop(target.proxy_jump)
    assert ours == sshtarget.split_hop(by_ssh.replace("[1.2.3.4]", "1.2.3.4")), by_ssh
