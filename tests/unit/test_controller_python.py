"""clusterlaunch on a Python older than 3.10 refuses in one line, exit 2, on every way in.

A forced install or a checkout run by an older interpreter ended in a traceback from
whichever module it reached first (3.9: dataclass's ``kw_only``; 3.8: ``'type' object
is not subscriptable``; 3.7 and 2.7: a SyntaxError). The pyenv builds in /root stand in
for such a machine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.exits import ExitStatus

ROOT = Path(__file__).resolve().parents[2]
OLD_PYTHONS = sorted(
    path
    for path in Path("/root/.pyenv/versions").glob("[23].*/bin/python")
    if tuple(int(part) for part in path.parts[-3].split(".")[:2]) < (3, 10)
)
WAYS_IN = {
    "python -m clusterlaunch": ["-m", "clusterlaunch", "--version"],
    "the console script's target": ["-c", "from clusterlaunch.cli.main import script; script()"],
    "import clusterlaunch": ["-c", "import clusterlaunch"],
}


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python older than 3.10 here (pyenv)")
@pytest.mark.parametrize("python", OLD_PYTHONS, ids=lambda path: path.parts[-3])
@pytest.mark.parametrize("way", WAYS_IN)
def test_an_older_python_is_refused_in_one_line(tmp_path: Path, python: Path, way: str) -> None:
    done = subprocess.run(
        [str(python), *WAYS_IN[way]],
        cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"},  # 2.7: .pyc beside
    )  # fmt: skip
    version = ".".join(python.parts[-3].split(".")[:2])
    assert (done.returncode, done.stdout) == (ExitStatus.USAGE, "")
    assert done.stderr == (
        f"clusterlaunch: error: {python} is Python {version}; clusterlaunch needs Python 3.10"
        " or newer on this machine (install it into a newer Python's environment)\n"
    )


def test_the_refusal_names_the_version_the_package_requires() -> None:
    required = re.search(
        r'requires-python = ">=(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text()
    )
    guard = (ROOT / "clusterlaunch" / "__init__.py").read_text()
    assert required is not None
    major, minor = required.groups()
    assert f"sys.version_info < ({major}, {minor})" in guard
    assert f"needs Python {major}.{minor} or newer" in guard
