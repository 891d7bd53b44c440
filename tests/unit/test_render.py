"""render's small helpers for one-line errors."""

from __future__ import annotations

from clusterlaunch.core import render


def test_a_commands_last_lines_on_one_line() -> None:
    said = b"warning: one\nrsync: link_stat \xff failed\nrsync error: code 23\n\n"
    assert render.last_lines(said, 2) == "rsync: link_stat \ufffd failed | rsync error: code 23"
    assert render.last_lines(said, 3).startswith("warning: one | ")


def test_nothing_said_is_an_empty_string() -> None:
    assert render.last_lines(b" \n\n", 3) == ""
