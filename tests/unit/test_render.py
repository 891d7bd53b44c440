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
