"""``Host`` and ``Match`` patterns match as ssh's match.c matches them (``ssh -G`` is the
ground truth): ``*`` and ``?`` are the only wildcards, ``!`` excludes, ``Match`` takes
comma lists, and ``Match host``/``originalhost`` compare in any case where ``Host`` does
not. paramiko's fnmatch read ``[01]`` as a character class: ``Host node[01]`` gave node0
the port ssh gives only a host named ``node[01]``, and the paramiko client dialled it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshresolve, sshtarget
from clusterlaunch.transport.hostnames import pattern_list_matches, pattern_matches
from tests.unit.sshtruth import ssh_g

CASES = {
    "Host brackets are no class": ("Host node[01]\n  Port 2201\n", "node0"),
    "Host brackets name a host": ("Host node[01]\n  Port 2201\n", "node[01]"),
    "Host negated brackets": ("Host !node[01] node*\n  Port 2202\n", "node0"),
    "Host in its case": ("Host NODE*\n  Port 2203\nHost node*\n  Port 2204\n", "node0"),
    "Host question mark": ("Host n?de0\n  Port 2205\n", "node0"),
    "Match host brackets": ("Match host node[01]\n  Port 2206\n", "node0"),
    "Match host name in capitals": ("Match host node*\n  Port 2207\n", "NODE0"),
    "Match host HostName in capitals": (
        "Host alias\n  HostName NODE0\nMatch host node?\n  Port 2208\n",
        "alias",
    ),
    "Match originalhost brackets": ("Match originalhost node[01]\n  Port 2209\n", "node0"),
    "Match originalhost in capitals": ("Match originalhost node0\n  Port 2210\n", "NODE0"),
    "Match host list, a negation wins": ("Match host x,!node*,*\n  Port 2211\n", "node0"),
    "Match host list": ("Match host x,[n]ode0,node?\n  Port 2212\n", "node0"),
    "Match user brackets": ("Match user [a]lice\n  Port 2213\n", "node0"),
    "Match user in its case": ("Match user ALICE\n  Port 2214\nMatch user al*\n  User u\n", "n0"),
    "Match localuser brackets": ("Match localuser [a-z]*\n  Port 2215\n", "node0"),
}


def _port_and_user(target: sshtarget.SshTarget) -> tuple[int, str | None]:
    return target.port, target.user


@pytest.mark.parametrize("case", CASES)
def test_patterns_match_as_ssh_matches_them(tmp_path: Path, case: str) -> None:
    text, name = CASES[case]
    config = tmp_path / "config"
    config.write_text(text)
    spec = HostSpec(host=name, gpus=1, user="alice")
    shown = ssh_g(config, name)
    assert shown.returncode == 0, shown.stderr
    # ssh -G shows the local user where none is set: -l alice is what it would use.
    by_ssh = sshtarget.target_from(sshresolve.parse_options(shown.stdout), spec)
    [ours] = sshconfig.resolve_targets(str(config), [spec])
    assert _port_and_user(ours) == _port_and_user(by_ssh)


def test_the_bracket_cases_differ_where_fnmatch_read_them_otherwise(tmp_path: Path) -> None:
    found = {}
    for index, case in enumerate(CASES):
        text, name = CASES[case]
        config = tmp_path / f"config{index}"
        config.write_text(text)
        [found[case]] = sshconfig.resolve_targets(str(config), [HostSpec(host=name, gpus=1)])
    assert found["Host brackets are no class"].port == 22
    assert found["Host brackets name a host"].port == 2201
    assert found["Host negated brackets"].port == 2202
    assert found["Match host brackets"].port == 22
    assert found["Match host name in capitals"].port == 2207
    assert found["Match host HostName in capitals"].port == 2208


@pytest.mark.parametrize(
    ("name", "pattern", "matches"),
    [
        ("node0", "node[01]", False),
        ("node[01]", "node[01]", True),
        ("node0", "n*0", True),
        ("node0", "*", True),
        ("", "*", True),
        ("node0", "node?", True),
        ("node", "node?", False),
        ("node0", "NODE0", False),
        ("a.b", "a?b", True),
        ("ab", "a.b", False),
        ("a\\b", "a\\*", True),
        ("a+b", "a+*", True),
        ("node12", "*1*2", True),
        ("node21", "*1*2", False),
    ],
)
def test_a_pattern_has_two_wildcards_and_no_others(name: str, pattern: str, matches: bool) -> None:
    assert pattern_matches(name, pattern) is matches


def test_a_pattern_list_is_comma_separated_and_a_negation_wins() -> None:
    assert pattern_list_matches("x,node*", "node0", lower=False)
    assert not pattern_list_matches("node*,!node0", "node0", lower=False)
    assert not pattern_list_matches("!node1", "node0", lower=False)  # nothing positive
    assert pattern_list_matches("NODE*", "node0", lower=True)
    assert not pattern_list_matches("NODE*", "node0", lower=False)


def test_a_message_names_the_line_of_the_block_whose_host_pattern_matches(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host node[01]\n  Port 1\nHost node?\n  Port 1\n")
    assert sshconfig.read_ssh_config(str(config)).where("port", "node0", "1") == f"{config}:4"
