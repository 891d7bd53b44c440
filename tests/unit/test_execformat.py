"""Whether a host can execute a file (``remote/execformat.py``): bash's "binary file" rule,
checked against bash itself, and an ELF's machine, against this host's real binaries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.remote.execformat import (
    binfmt_runs,
    elf_kind,
    host_elf_kind,
    looks_binary,
    start_problem,
)
from tests.binaries import foreign_elf, foreign_elf_runs_here

LONG_LINE = b"echo " + b"x" * 123 + b"\0\n"
"""A NUL past bash's 128-byte sample: not binary to bash, which runs it as a script."""
CASES = {
    b"\x7fELF echo ran\n": True,  # the magic alone: bash 5 refuses it
    b"echo ran\0\n": True,
    b"#!\necho ran\0\n": True,  # after #! (an empty one: ENOEXEC) the second line counts
    b"echo ran\n\0\n": False,
    b"#!\necho ran\n\0\n": False,
    LONG_LINE: False,
    LONG_LINE[:5] + LONG_LINE[6:]: True,  # its NUL the sample's last byte
    b"": False,
}


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the rule's reference")
@pytest.mark.parametrize(("head", "binary"), CASES.items())
def test_looks_binary_as_bash_decides(tmp_path: Path, head: bytes, binary: bool) -> None:
    program = tmp_path / "program"
    program.write_bytes(head)
    program.chmod(0o755)
    by_bash = subprocess.run(["bash", "-c", '"$@"', "bash", str(program)], capture_output=True)
    refused = by_bash.returncode == 126 and b"cannot execute binary file" in by_bash.stderr
    assert looks_binary(head) == refused == binary, by_bash


def test_the_elf_kind_of_this_pythons_own_binary() -> None:
    with open(os.path.realpath(sys.executable), "rb") as handle:
        kind = elf_kind(handle.read(64))
    assert kind is not None and kind == host_elf_kind()
    assert kind[0] == (2 if sys.maxsize > 2**32 else 1) and kind[2] in (2, 3)
    assert elf_kind(b"#!/bin/sh\n") is None and elf_kind(b"\x7fELF") is None


def test_a_program_built_for_another_machine_is_refused(tmp_path: Path) -> None:
    if foreign_elf_runs_here():
        pytest.skip("a binfmt_misc handler (qemu-user) runs it here")
    program = tmp_path / "foreign"
    program.write_bytes(foreign_elf())
    program.chmod(0o755)
    why = start_problem("./foreign", str(program))
    assert why is not None and why.startswith("program './foreign' is built for 64-bit ")
    assert "(Exec format error): install or build it for 64-bit " in why
    assert start_problem("true", shutil.which("true") or "/bin/true") is None


def test_a_binary_that_is_not_a_program_is_refused(tmp_path: Path) -> None:
    data, obj = tmp_path / "data.bin", tmp_path / "train.o"
    data.write_bytes(b"PK\x03\x04\0\0 zip")
    header = bytearray(foreign_elf()[:64])
    header[16:18] = (1).to_bytes(2, "little" if header[5] == 1 else "big")  # ET_REL
    obj.write_bytes(bytes(header))
    assert "is a binary file but not an ELF program" in (start_problem("d", str(data)) or "")
    assert "is an ELF object or core file, not a program" in (start_problem("o", str(obj)) or "")
    text = tmp_path / "text"
    text.write_bytes(b"echo ran\n\0")
    assert "has no #! line" in (start_problem("t", str(text)) or "")


def test_a_binfmt_misc_entry_runs_what_its_magic_matches(tmp_path: Path) -> None:
    """As qemu-user-static registers itself: then a foreign binary does run."""
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "register").write_text("")
    entry = "enabled\ninterpreter /usr/bin/qemu-x\nflags: F\noffset 0\nmagic %s\nmask %s\n"
    head = foreign_elf()[:64]
    mask = "ff" * 18 + "ffff"
    (tmp_path / "qemu-x").write_text(entry % (head[:20].hex(), mask))
    assert binfmt_runs(head, folder=str(tmp_path))
    assert not binfmt_runs(b"\x7fELF" + bytes(60), folder=str(tmp_path))
    (tmp_path / "qemu-x").write_text(entry.replace("enabled", "disabled", 1) % (head.hex(), mask))
    assert not binfmt_runs(head, folder=str(tmp_path))
    assert not binfmt_runs(head, folder=str(tmp_path / "none"))
