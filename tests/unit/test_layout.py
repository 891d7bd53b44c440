"""The package layout keeps its promises: a pure core, small modules, few top-level files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import clusterlaunch

PACKAGE = Path(clusterlaunch.__file__).parent
CORE_MODULES = sorted(p.stem for p in (PACKAGE / "core").glob("*.py") if p.stem != "__init__")
IO_MODULES = ("paramiko", "subprocess", "socket", "threading", "select")
MAX_LINES = 300


# One fresh interpreter forks a child per module, so each import starts from the
# same state without paying an interpreter start per module (23 starts took 1.9 s
# of the unit tier). Before forking it imports the libraries the core uses, after
# checking that they load no I/O module themselves: a child then imports only
# our code (0.1 s less each), and what it adds is what importing the module adds.
_IMPORT_EACH = """
import json, os, sys
io_modules = set(json.loads(sys.argv[1])) - set(sys.modules)  # beyond what Python had
for library in json.loads(sys.argv[2]):
    __import__(library)
assert not io_modules & set(sys.modules), sorted(io_modules & set(sys.modules))
found = {}
for module in sys.argv[3:]:
    read, write = os.pipe()
    if os.fork() == 0:
        before = set(sys.modules)
        __import__("clusterlaunch.core." + module)
        os.write(write, json.dumps(sorted((set(sys.modules) - before) & io_modules)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        found[module] = json.loads(pipe.read() or "null")
    os.wait()
print(json.dumps(found))
"""
LIBRARIES = ["collections", "contextlib", "dataclasses", "datetime", "difflib", "enum", "fnmatch"]
LIBRARIES += ["ipaddress", "json", "math", "re", "reprlib", "secrets", "shlex", "time", "typing"]
LIBRARIES += ["yaml"]


def test_no_core_module_loads_io() -> None:
    """Importing any core module loads none of the I/O modules (beyond what Python had).

    One test, not one per module: a module-scoped fixture ran the child once per
    xdist worker that drew one of them (0.4 s each).
    """
    io_modules, libraries = json.dumps(IO_MODULES), json.dumps(LIBRARIES)
    argv = [sys.executable, "-c", _IMPORT_EACH, io_modules, libraries, *CORE_MODULES]
    result = subprocess.run(argv, capture_output=True, text=True, check=True)
    found: dict[str, list[str] | None] = json.loads(result.stdout)
    assert set(found) == set(CORE_MODULES)
    # None: the import failed in the child.
    assert {module: io for module, io in found.items() if io != []} == {}


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


# Layers import downwards only: cli -> controller -> transport -> core (remote: core only).
_IMPORT_LINE = re.compile(r"^\s*(?:from|import)\s+clusterlaunch\.(\w+)", re.MULTILINE)
_MAY_NOT_IMPORT = {
    "core": {"cli", "controller", "transport", "testing"},
    "transport": {"cli", "controller", "testing"},
    "remote": {"cli", "controller", "transport", "testing"},  # core: bundled with it
}


@pytest.mark.parametrize("layer", sorted(_MAY_NOT_IMPORT))
def test_layers_import_downwards_only(layer: str) -> None:
    """transport/ used to import controller/fanout.py: a lower layer reaching up."""
    upward = {
        f"{path.relative_to(PACKAGE)}: clusterlaunch.{package}"
        for path in (PACKAGE / layer).rglob("*.py")
        for package in _IMPORT_LINE.findall(path.read_text())
        if package in _MAY_NOT_IMPORT[layer]
    }
    assert upward == set()
