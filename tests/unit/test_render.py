"""render's small helpers for one-line errors."""

from __future__ import annotations

from clusterlaunch.core import render
from clusterlaunch.core.reports import RemoteJob


def test_a_commands_last_lines_on_one_line() -> None:
    said = b"warning: one\nrsync: link_stat \xff failed\nrsync error: code 23\n\n"
    assert render.last_lines(said, 2) == "rsync: link_stat \ufffd failed | rsync error: code 23"
    assert render.last_lines(said, 3).startswith("warning: one | ")


def test_nothing_said_is_an_empty_string() -> None:
    assert render.last_lines(b" \n\n", 3) == ""


def test_ps_writes_control_characters_in_a_command_as_escapes() -> None:
    # A script named "evil\n\x1b[31mRED.py" broke each row into lines and put the
    # colour (and an OSC window title) on the terminal of whoever ran ps.
    command = ("python3", "-m", "torch.distributed.run", "--nnodes", "2", "--", "e\nvil\x1b[31m.py")
    job = RemoteJob("j1", "node0", 0, 0.0, (*command, "a\x1b]0;T\x07b", "\x9b1m"), 41)
    [_, row] = render.jobs_text([job]).splitlines()
    assert row.endswith("'e\\nvil\\x1b[31m.py' 'a\\x1b]0;T\\x07b' '\\x9b1m'")
    assert not any(ord(c) < 32 or 127 <= ord(c) <= 159 for c in row)


def test_an_ipv6_host_and_its_port_are_bracketed() -> None:
    """``fd42:6::10:2222`` is an address itself; ``[fd42:6::10]:2222`` as ssh's -W writes it."""
    from clusterlaunch.core.hostport import host_port

    assert host_port("fd42:6::10", 2222) == "[fd42:6::10]:2222"
    assert host_port("fe80::1%eth0", "AUTO") == "[fe80::1%eth0]:AUTO"
    assert host_port("10.0.0.1", 22) == "10.0.0.1:22"
    assert host_port("node0", 29500) == "node0:29500"


def test_the_dry_runs_master_is_bracketed_when_it_is_ipv6(tmp_path, capsys) -> None:
    from clusterlaunch.cli.main import main

    hosts = tmp_path / "h.yaml"
    hosts.write_text("hosts:\n  - {host: node0, gpus: 1}\n")
    argv = ["run", "--dry-run", "--ssh-config", "/dev/null", "--master-addr", "::1"]
    assert main([*argv, str(hosts), "train.py"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert " master [::1]:AUTO (auto: " in header, header
