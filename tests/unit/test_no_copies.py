"""No function is written out twice: what two modules need lives in one place.

Copies drift apart: tests/cluster's ``_running`` (a process seen on a host) and the
unit tests' ``work`` (a hosts file no command may contact) were each written twice,
now shared (tests/cluster/support.py, tests/unit/conftest.py). A function counts as a
copy of another when their bodies, docstrings aside, are the same statements, and at
least three of them (or one long one): short bodies such as ``return self._x`` repeat
by nature. (The remote programs' copies, which need not be word for word the same, are
tested by their bundles: test_remote_bundle.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("clusterlaunch", "tests", "benchmarks")
SHORT_STATEMENTS, SHORT_NODES = 3, 40
"""A body under both bounds is too short to count."""


def _body(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The function's statements as text (no docstring, no positions); None when short."""
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    statements = ast.Module(body=body, type_ignores=[])
    if len(body) < SHORT_STATEMENTS and len(list(ast.walk(statements))) < SHORT_NODES:
        return None
    return ast.dump(statements)


def _functions_by_body() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_bytes(), where)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    body = _body(node)
                    if body is not None:
                        found.setdefault(body, set()).add(f"{where}:{node.name}")
    return found


def test_no_function_is_a_copy_of_another() -> None:
    copies = {frozenset(where) for where in _functions_by_body().values() if len(where) > 1}
    assert copies == set(), "share these instead of copying them"
