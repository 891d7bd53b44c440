"""docs/cli.md's copy of ``run --help`` and its table of which command takes which
option, against the real parser: a flag added to the parser fails here until the doc
has it too."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from clusterlaunch.cli.parser import build_parser

CLI_DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
HELP_COLUMNS = "92"  # the terminal width the doc's copy was made at (argparse reads COLUMNS)


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _copied_help(command: str) -> str:
    """The text block that follows ``clusterlaunch COMMAND --help`:`` in the doc."""
    start = CLI_DOC.index(f"`clusterlaunch {command} --help`:")
    block = CLI_DOC.index("```text\n", start) + len("```text\n")
    return CLI_DOC[block : CLI_DOC.index("```\n", block)]


def _option_table() -> tuple[list[str], list[tuple[list[str], list[str]]]]:
    """The table's command columns, and each row's options with its cells."""
    start = CLI_DOC.index("| options | `run` |")
    lines = CLI_DOC[start:].split("\n\n", 1)[0].splitlines()
    columns = re.findall(r"`(\w+)`", lines[0])
    rows = []
    for line in lines[2:]:
        first, *cells = [cell.strip() for cell in line.strip("|").split("|")]
        options = re.findall(r"`(-[-\w]+)`", first.split("):", 1)[-1])
        rows.append((options, cells))
    return columns, rows


def test_the_copy_of_run_help_is_what_run_help_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", HELP_COLUMNS)
    assert _copied_help("run") == _commands()["run"].format_help()


def test_the_option_table_names_every_command_that_takes_a_host() -> None:
    columns, _ = _option_table()
    assert sorted(columns) == sorted(set(_commands()) - {"sandbox"})


def test_the_option_table_says_which_command_takes_which_option() -> None:
    columns, rows = _option_table()
    commands = _commands()
    documented: dict[str, set[str]] = {}
    for options, cells in rows:
        assert len(cells) == len(columns), options
        for option in options:
            assert option not in documented, f"{option} has two rows"
            documented[option] = {cmd for cmd, cell in zip(columns, cells, strict=True) if cell}
    taken: dict[str, set[str]] = {}
    for command in columns:
        for action in commands[command]._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    taken.setdefault(option, set()).add(command)
    assert documented == taken
