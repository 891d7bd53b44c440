"""Two entries that reach one sshd, however its address is spelled: refused before anything
starts (``core/sameserver.py``). ``fd42:6::11`` and ``FD42:6:0::11`` are one address; as
strings they differ, and ``exec`` ran twice on that host, ``run`` failed with "a job with
this id is already running here"."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.main import main

CONFIG = "Host via-config\n    HostName fd42:0006::0011\n"


@pytest.mark.parametrize(
    ("first", "second", "server"),
    [
        ("fd42:6::11", "FD42:6:0::11", "[FD42:6:0::11]:22"),
        ("fd42:6::11", "via-config", "[fd42:0006::0011]:22"),
        ("10.0.0.11", "::ffff:10.0.0.11", "[::ffff:10.0.0.11]:22"),
        ("Node-A", "node-a", "node-a:22"),  # ssh lowercases a host name
    ],
)
def test_one_sshd_spelled_two_ways_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first: str, second: str, server: str
) -> None:
    (tmp_path / "ssh_config").write_text(CONFIG)
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        f'hosts:\n  - {{host: "{first}", gpus: 1}}\n  - {{host: "{second}", gpus: 1}}\n'
    )
    argv = ["exec", "--dry-run", "--ssh-config", str(tmp_path / "ssh_config"), str(hosts)]
    assert main([*argv, "--", "true"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err == (
        f"clusterlaunch: error: {hosts}:3: host: {second} reaches the same sshd as {first} at "
        f"line 2 ({server} after your SSH config); list each host once and raise its gpus "
        "instead\n"
    )


def test_other_addresses_stay_other_hosts(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(
        'hosts:\n  - {host: "fd42:6::11", gpus: 1}\n  - {host: "fd42:6::12", gpus: 1}\n'
    )
    assert main(["exec", "--dry-run", "--ssh-config", "/dev/null", str(hosts), "--", "true"]) == 0
