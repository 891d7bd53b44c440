"""The dependency floors in pyproject.toml: the oldest versions an install may get."""

from __future__ import annotations

import re
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _floor(name: str) -> tuple[int, ...]:
    found = re.search(rf'"{name}>=([0-9.]+)"', PYPROJECT.read_text())
    assert found is not None, f"no {name}>= floor in pyproject.toml"
    return tuple(int(part) for part in found.group(1).split("."))


def test_paramiko_s_floor_imports_without_a_warning() -> None:
    # paramiko 3.4.0 with cryptography 43-47 printed four CryptographyDeprecationWarning
    # lines ("TripleDES has been moved") on every command, --dry-run too; 3.4.1 is the
    # first release that imports TripleDES from its new module (checked with both
    # wheels and cryptography 45: 3.4.0 warns, 3.4.1 does not).
    assert _floor("paramiko") >= (3, 4, 1)
