"""The package layout keeps its promises: a pure core, small modules, few top-level files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import clusterlaunch

PACKAGE = Path(clusterlaunch.__file__).parent
CORE_MODULES = sorted(p.stem for p in (PACKAGE / "core").glob("*.py") if p.stem != "__init__")
IO_MODULES = ("paramiko", "subprocess", "socket", "threading", "select")
MAX_LINES = 300


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_loads_no_io(module: str) -> None:
    """Importing any core module loads none of the I/O modules (beyond what Python had)."""
    code = (
        "import json, sys; before = set(sys.modules); "
        f"import clusterlaunch.core.{module}; "
        f"print(json.dumps(sorted(set(sys.modules) - before & set({list(IO_MODULES)!r}))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(loaded) == []


def test_core_is_not_empty() -> None:
    assert {"planner", "commands", "hostfile", "outcome", "exits"} <= set(CORE_MODULES)


def test_no_module_over_300_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE)): count
        for path in PACKAGE.rglob("*.py")
        if (count := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_at_most_three_files_directly_in_the_package() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 3, top
