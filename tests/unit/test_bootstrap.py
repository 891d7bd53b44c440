"""The bootstrap runs a payload's compiled part on the controller's Python, its source elsewhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from clusterlaunch import remote
from clusterlaunch.core import bootstrap

# What follows the payload on stdin belongs to the program: it shows it too.
PROGRAM = b"import os, sys\nsys.stdout.write(%s + ' ' + os.read(0, 100).decode())\n"


def payload_of(compiled_says: str, source_says: str) -> bytes:
    """A payload whose compiled part and source part say different things."""
    payload = bootstrap.encode_payload("test", PROGRAM % repr(compiled_says).encode())
    offset = int(payload[4:12])
    return payload[:offset] + zlib.compress(PROGRAM % repr(source_says).encode())


def run_bootstrap(payload: bytes, stdin: bytes, size: int | None = None) -> tuple[int, str]:
    argv = bootstrap.bootstrap_argv(sys.executable, "test", size or len(payload), site=False)
    done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    return done.returncode, done.stdout.decode()


def test_the_same_python_runs_the_compiled_part_and_the_program_gets_the_rest() -> None:
    payload = payload_of("compiled", "source")
    assert run_bootstrap(payload, payload + b"control bytes") == (0, "compiled control bytes")


def test_another_bytecode_compiles_the_source() -> None:
    payload = payload_of("compiled", "source")
    other = b"\x00\x00\r\n" + payload[4:]  # the magic of no Python
    assert run_bootstrap(other, other + b"after") == (0, "source after")


def test_stdin_closed_early_is_98() -> None:
    payload = payload_of("compiled", "source")
    assert run_bootstrap(payload, payload[:-5], size=len(payload)) == (98, "")


OLD_PYTHONS = sorted(Path("/root/.pyenv/versions").glob("[23].[0-7].*/bin/python"))


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python older than 3.8 here (pyenv)")
@pytest.mark.parametrize("python", OLD_PYTHONS, ids=lambda path: path.parts[-3])
def test_an_older_python_says_so_in_one_line(python: Path) -> None:
    # It printed a SyntaxError at the walrus; CentOS 7's python3 is 3.6.
    payload = payload_of("compiled", "source")
    argv = bootstrap.bootstrap_argv(str(python), "agent", len(payload), site=False)
    done = subprocess.run(argv, input=payload, capture_output=True, check=False)
    version = python.parts[-3].rsplit(".", 1)[0]
    said = f"{python} is Python {version}; clusterlaunch needs Python 3.8 or newer on the hosts"
    assert done.returncode == 1 and done.stdout == b""
    assert (
        done.stderr.decode()
        == f"clusterlaunch: {said} (set python: in the hosts file, or --python)\n"
    )
    found = bootstrap.too_old_python("login noise | " + done.stderr.decode().strip())
    assert found is not None and found.startswith(said)


def test_tracebacks_name_the_program_either_way() -> None:
    payload = bootstrap.encode_payload("agent", b"def f():\n    raise KeyError('x')\n\nf()\n")
    argv = bootstrap.bootstrap_argv(sys.executable, "agent", len(payload), site=False)
    done = subprocess.run(argv, input=payload, capture_output=True, check=False)
    assert b'File "clusterlaunch-agent", line 2, in f' in done.stderr


def test_shipped_programs_are_about_their_source_s_size_and_load_whole() -> None:
    for name in remote.BUNDLES:
        payload = remote.program_payload(name)
        assert bootstrap.is_payload_for_this_python(payload)
        assert len(payload) < 1.1 * len(remote.program_source(name))  # both parts, compressed
        offset = int(payload[4:12])
        assert zlib.decompress(payload[offset:]) == remote.program_source(name)


def test_the_installed_package_is_never_written_to(tmp_path: Path) -> None:
    """A payload beside the package's bytecode was no file of the install's record: ``pip
    uninstall`` left it and its folders, and a later ``import clusterlaunch`` found a
    namespace package (``cannot import name 'program_payload'``). A copy of the package,
    writable, run as a command runs it: its payloads go to the user's cache only."""
    package = tmp_path / "site" / "clusterlaunch"
    shutil.copytree(
        Path(remote.__file__).parent.parent, package, ignore=shutil.ignore_patterns("*.payload")
    )
    before = sorted(path for path in package.rglob("*") if "__pycache__" not in path.parts)
    cache = tmp_path / "cache"
    environment = {**os.environ, "PYTHONPATH": str(package.parent), "XDG_CACHE_HOME": str(cache)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    build = "from clusterlaunch import remote; [remote.program_payload(n) for n in remote.BUNDLES]"
    for _ in range(2):  # built, then read back
        argv = [sys.executable, "-c", build + "; print(remote.__file__)"]
        done = subprocess.run(argv, env=environment, cwd=tmp_path, capture_output=True, check=True)
        assert done.stdout.decode().strip() == str(package / "remote" / "__init__.py")
    assert not list(package.rglob("*.payload"))
    after = sorted(path for path in package.rglob("*") if "__pycache__" not in path.parts)
    assert after == before
    assert {path.name.split(".")[0] for path in (cache / "clusterlaunch").iterdir()} == set(
        remote.BUNDLES
    )


FATAL = """Python path configuration:
  PYTHONHOME = '/opt/old'
  PYTHONPATH = (not set)
Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding
Python runtime state: core initialized
ModuleNotFoundError: No module named 'encodings'
"""


def test_a_python_its_environment_broke_is_named_by_its_fatal_error_and_variable():
    said = bootstrap.could_not_start("/opt/venv/bin/python", 1, FATAL)
    assert said == (
        "/opt/venv/bin/python failed to start (exit 1): Fatal Python error: init_fs_encoding: "
        "failed to get the Python codec of the filesystem encoding; its environment has "
        "PYTHONHOME=/opt/old (from setup: or the host's login files): unset or correct it"
    )
    tail_only = " | ".join(FATAL.splitlines()[3:])  # a one-line tail, past the variable
    assert "PYTHONHOME or PYTHONPATH in its environment may point it elsewhere" in str(
        bootstrap.could_not_start("py", 1, tail_only)
    )
    assert (
        bootstrap.could_not_start("/bin/bash", 2, "bash: -c: option requires an argument") is None
    )
