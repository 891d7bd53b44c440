"""Executable files this host's kernel refuses (ENOEXEC), made from a real one."""

from __future__ import annotations

import shutil

from clusterlaunch.remote.execformat import binfmt_runs, elf_kind, host_elf_kind

AARCH64, X86_64 = 183, 62


def foreign_elf() -> bytes:
    """``true``'s bytes with another machine in its ELF header (AArch64, or x86-64 on an
    AArch64 host): a program built for another machine, as ``file`` would say."""
    with open(shutil.which("true") or "/bin/true", "rb") as handle:
        data = bytearray(handle.read())
    kind, host = elf_kind(bytes(data)), host_elf_kind()
    assert kind is not None and host is not None
    other = X86_64 if host[3] == AARCH64 else AARCH64
    data[18:20] = other.to_bytes(2, "big" if kind[1] == 2 else "little")
    return bytes(data)


def foreign_elf_runs_here() -> bool:
    """A binfmt_misc handler (qemu-user) would run :func:`foreign_elf`'s file after all."""
    return binfmt_runs(foreign_elf())
