"""What the distributions carry: the license (as an SPDX expression, PEP 639, and its
text), the type hints' marker (PEP 561), and, in the sdist, the docs the README and
the messages point to. Built from a copy of the checkout by setuptools' own backend,
as pip builds it (offline: the backend installed here, no build isolation)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = (  # the output folder bound first: the backend rewrites sys.argv
    "import sys, setuptools.build_meta as backend; "
    "out = sys.argv[1]; backend.build_sdist(out); backend.build_wheel(out)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel) of this checkout's files (tracked, or new and not ignored)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    source, dist = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("dist")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    done = subprocess.run(
        [sys.executable, "-c", BUILD, str(dist)], cwd=source, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "deprecat" not in done.stderr.lower(), done.stderr  # the license table's warning
    [sdist], [wheel] = dist.glob("*.tar.gz"), dist.glob("*.whl")
    return sdist, wheel


def test_the_wheel_carries_the_license_and_the_type_hints_marker(built: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(built[1]) as wheel:
        names = wheel.namelist()
        [metadata] = [name for name in names if name.endswith(".dist-info/METADATA")]
        fields = wheel.read(metadata).decode().split("\n\n", 1)[0].splitlines()
        [license_file] = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
        text = wheel.read(license_file).decode()
    assert "License-Expression: Apache-2.0" in fields and "License-File: LICENSE" in fields
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "clusterlaunch/py.typed" in names


def test_the_sdist_carries_the_license_and_the_docs(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[0]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    docs = {str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")}
    assert docs and docs <= names
    assert {"LICENSE", "README.md", "examples/hello_ranks.py", "clusterlaunch/py.typed"} <= names
