"""Exit statuses: one table for the command line, the agent and the transports, as documented."""

from __future__ import annotations

import ast
import re
import signal
from pathlib import Path

import pytest

from clusterlaunch.core.exits import ExitStatus, from_signal, shell_status
from clusterlaunch.remote import BUNDLES, program_source

CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_statuses() -> set[int]:
    """The numbers in the first column of docs/cli.md's "Exit statuses" table."""
    section = CLI_DOC.read_text().split("\n## Exit statuses\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]  # header, rule
    assert rows, "no table under ## Exit statuses"
    numbers: set[int] = set()
    for row in rows:
        first = row.split("|")[1].strip()
        numbers.update(int(word) for word in re.findall(r"\b\d+\b", first))
    return numbers


def test_docs_table_lists_exactly_the_statuses() -> None:
    statuses = {value for name, value in vars(ExitStatus).items() if name.isupper()}
    assert len(statuses) == 13
    assert documented_statuses() == statuses


def test_shell_status_is_what_a_shell_reports() -> None:
    assert [shell_status(code) for code in (0, 7, -9, -15, None)] == [0, 7, 137, 143, 255]


@pytest.mark.parametrize(
    ("signum", "status"),
    [
        (signal.SIGHUP, ExitStatus.HANGUP),
        (signal.SIGINT, ExitStatus.INTERRUPTED),
        (signal.SIGKILL, ExitStatus.KILLED),
        (signal.SIGPIPE, ExitStatus.BROKEN_PIPE),
        (signal.SIGTERM, ExitStatus.TERMINATED),
    ],
)
def test_signal_statuses(signum: signal.Signals, status: ExitStatus) -> None:
    assert from_signal(signum) == status
    assert shell_status(-signum) == status


def test_a_status_reads_as_its_number() -> None:
    # Messages show the number on every Python (the agent formats with %).
    percent = "%s" % ExitStatus.USAGE  # noqa: UP031
    assert (str(ExitStatus.TIMEOUT), f"{ExitStatus.KILLED}", percent) == ("124", "137", "2")


def imported_names(node: ast.Try) -> list[ast.alias]:
    """What a top-level ``try`` imports, in its body or any handler."""
    found: list[ast.alias] = []
    for part in [*node.body, *(line for handler in node.handlers for line in handler.body)]:
        if isinstance(part, ast.Import | ast.ImportFrom):
            found += part.names
    return found


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_every_bundle_defines_what_its_modules_import(name: str) -> None:
    """The ``# bundle: strip`` imports name things an earlier part of the bundle defines."""
    defined: set[str] = set()
    for module in BUNDLES[name]:
        path = module if "/" in module else f"remote/{module}"
        source = (Path(__file__).resolve().parents[2] / "clusterlaunch" / f"{path}.py").read_text()
        tree = ast.parse(source)
        for node in tree.body:
            if isinstance(node, ast.Try):  # try: import _signal as signal / except: ...
                defined.update(alias.asname or alias.name for alias in imported_names(node))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clusterlaunch"):
                missing = {alias.name for alias in node.names} - defined
                assert not missing, f"{module} imports {missing} before the bundle defines them"
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    namespace: dict[str, object] = {"__name__": "bundled"}
    exec(compile(program_source(name), f"clusterlaunch-{name}", "exec"), namespace)
    assert namespace["ExitStatus"] is not ExitStatus  # its own copy, not the package's
    assert int(namespace["ExitStatus"].NOT_STARTED) == 127  # type: ignore[attr-defined]
