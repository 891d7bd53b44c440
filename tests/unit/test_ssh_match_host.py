"""``Match host`` matched against the host name ssh matches it against (``ssh -G`` is the
ground truth; canonicalization's cases, which need a DNS server, are in
test_ssh_canonical.py).

ssh's first pass matches ``Match host`` against the ``HostName`` set so far with
``%h`` (the name given) and ``%%`` expanded (readconf.c's match_cfg_line), a later
pass against the host name the first resolved. paramiko matched the ``HostName``
as written: ``HostName %h.lan`` missed ``Match host n0.lan`` and matched ``Match
host %h.lan``. The second pass expanded that name a second time: ``HostName a%%h``
was ``a`` and the alias, where ssh's is ``a%h``.
"""

from __future__ import annotations

import getpass
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.transport import sshconfig, sshresolve, sshtarget
from clusterlaunch.transport.hostnames import ssh_host_name
from tests.unit.sshtruth import ssh_g

CASES = {
    "%h, then Match host": "Host n0\n  HostName %h.lan\nMatch host n0.lan\n  Port 2201\n",
    "%h, Match host written with %h": (
        "Host n0\n  HostName %h.lan\nMatch host %h.lan\n  Port 2201\n"
    ),
    "%h, Match host with a wildcard": "Host n0\n  HostName %h.lan\nMatch host n?.l*\n  Port 2201\n",
    "%h, Match host negated": "Host n0\n  HostName %h.lan\nMatch host !n0.lan,*\n  Port 2201\n",
    "%h, Match host in capitals": "Host n0\n  HostName X%h\nMatch host XN0\n  Port 2201\n",
    "%h twice and %%": "Host n0\n  HostName %h%%%h\nMatch host n0%n0\n  Port 2201\n",
    "%%, then Match host": "Host n0\n  HostName a%%b\nMatch host a%b\n  Port 2201\n",
    "%%, Match host written with %%": "Host n0\n  HostName a%%b\nMatch host a%%b\n  Port 2201\n",
    "a Match host above HostName": (
        "Match host n0.lan\n  User early\nHost n0\n  HostName %h.lan\n"
        "Match host n0.lan\n  Port 2201\n"
    ),
    "Match host and originalhost": (
        "Host n0\n  HostName %hx\nMatch host n0x originalhost n0\n  Port 2201\n"
        "Match originalhost n0x\n  User wrong\n"
    ),
    "Match final host, %%h expanded once": (
        "Host n0\n  HostName A%%h\nMatch final host a%h\n  Port 2201\n"
    ),
    "Match final, %%h expanded once": "Host n0\n  HostName a%%h\nMatch final\n  Port 2201\n",
    "Match !final host, then final": (
        "Host n0\n  HostName %h.LAN\nMatch !final host n0.lan\n  Port 2201\n"
        "Match final host n0.lan\n  User fin\n"
    ),
    "Match host after a first pass's Match host": (
        "Host n0\n  HostName %h.lan\nMatch host n0.lan\n  HostName z\n  Port 2201\n"
        "Match host z\n  User wrong\nHost *.lan\n  User lan\nMatch final all\n"
    ),
}


def _fields(target: SshTarget) -> tuple[object, ...]:
    # ssh lowercases the name it connects to; clusterlaunch where it uses it (ssh_host_name)
    return ssh_host_name(target), target.user or getpass.getuser(), target.port


def _by_ssh(config: Path, alias: str) -> SshTarget:
    shown = ssh_g(config, alias)
    assert shown.returncode == 0, shown.stderr
    return sshtarget.target_from(
        sshresolve.parse_options(shown.stdout), HostSpec(host=alias, gpus=1)
    )


def _ours(config: Path, alias: str = "n0") -> SshTarget:
    [target] = sshconfig.resolve_targets(str(config), [HostSpec(host=alias, gpus=1)])
    return target


@pytest.mark.parametrize("case", CASES)
def test_match_host_sees_the_host_name_ssh_matches(tmp_path: Path, case: str) -> None:
    config = tmp_path / "config"
    config.write_text(CASES[case])
    assert _fields(_ours(config)) == _fields(_by_ssh(config, "n0"))


def test_the_cases_differ_where_paramiko_matched_hostname_as_written(tmp_path: Path) -> None:
    found = {}
    for number, (case, text) in enumerate(CASES.items()):
        config = tmp_path / f"config{number}"
        config.write_text(text)
        found[case] = _ours(config)
    assert found["%h, then Match host"].port == 2201
    assert found["%h, Match host written with %h"].port == 22
    assert found["%h, Match host in capitals"].port == 2201
    assert found["%h twice and %%"].port == 2201
    assert found["%%, then Match host"].port == 2201
    assert found["%%, Match host written with %%"].port == 22
    above = found["a Match host above HostName"]
    assert (above.port, above.user) == (2201, None)
    assert found["Match final host, %%h expanded once"].port == 2201
    assert found["Match final, %%h expanded once"].hostname == "a%h"
    assert found["Match host after a first pass's Match host"].hostname == "n0.lan"


VERSIONED = {
    "Match !final alone": (
        "Host n0\n  HostName %h.LAN\nMatch !final\n  Port 2201\nHost n0.lan\n  User fin\n"
    ),
    "Match !final in Match host": (
        "Match host n0 !final\n  Port 2201\nMatch canonical\n  User fin\n"
    ),
}
"""Configs OpenSSH versions read differently (a second pass before 10.1, none after):
resolved by the local ``ssh -G``, refused by the paramiko client (test_sshcompat.py)."""


@pytest.mark.parametrize("case", VERSIONED)
def test_a_match_not_final_is_read_by_the_ssh_here(tmp_path: Path, case: str) -> None:
    config = tmp_path / "config"
    config.write_text(VERSIONED[case])
    assert str(sshconfig.read_ssh_config(str(config)).ssh_only).startswith(f"{config}:")
    assert _fields(_ours(config)) == _fields(_by_ssh(config, "n0"))
    config.write_text(VERSIONED[case] + "Match final all\n")  # a second pass in any version
    assert sshconfig.read_ssh_config(str(config)).ssh_only is None
    assert _fields(_ours(config)) == _fields(_by_ssh(config, "n0"))


def test_a_host_name_ssh_cannot_expand_for_match_host_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host n0\n  HostName %p\nMatch host x\n  Port 2201\n")
    shown = ssh_g(config, "n0")
    assert shown.returncode != 0 and "unknown key %p" in shown.stderr, shown.stderr
    with pytest.raises(UsageError) as refused:
        _ours(config)
    assert str(refused.value) == (
        f"{config}:2, host n0: HostName '%p': %p is no token of HostName; ssh refuses it "
        "(it knows %h and %%): write %% for a '%'"
    )
