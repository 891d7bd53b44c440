"""Whether this host can execute a file: bash's "binary file" rule and an ELF's machine.

Stdlib only, Python >= 3.8; bundled into the agent (exec's ``/bin/sh`` fallback for a
file the kernel refused, ENOEXEC) and into the probe and agent's preflight (a
``--no-python`` program, which torchrun starts without any fallback).
"""

import os
import sys

SAMPLE_SIZE = 128
"""Bytes bash reads of a file the kernel would not execute (execute_cmd.c's sample,
HASH_BANG_BUFSIZ: in bash 5.2 a NUL at byte 127 counts, at 128 not; measured)."""
BINFMT_MISC = "/proc/sys/fs/binfmt_misc"
MACHINES = {2: "SPARC", 3: "i386", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S/390"}
MACHINES.update({40: "ARM", 43: "SPARC V9", 62: "x86-64", 183: "AArch64", 243: "RISC-V"})
MACHINES.update({258: "LoongArch"})
"""ELF e_machine numbers (elf.h's EM_*) by the names people know them by."""
RUNS_32_BIT = {62: (3, 62), 183: (40,), 21: (20,), 22: (22,), 43: (2,)}
"""A 64-bit host machine's 32-bit machines its kernel can run (compat: i386 and x32 on
x86-64, ARM on AArch64, ...): let through, as refusing them would keep a program that
may well run from running."""


def read_head(path, size=256):
    """The first ``size`` bytes of ``path`` (binfmt_misc's look: 256), or None."""
    try:
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def looks_binary(head):
    """bash 5's rule (general.c, check_binary_file, on execute_cmd.c's 128-byte sample),
    for a file the kernel refused: ELF magic, or a NUL in the first line (the first two
    after ``#!``). bash then says "cannot execute binary file" (126); else it runs the file
    as a shell script."""
    sample = head[:SAMPLE_SIZE]
    if sample.startswith(b"\x7fELF"):
        return True
    lines = 2 if sample.startswith(b"#!") else 1
    for byte in sample:
        if byte == 0:
            return True
        if byte == 10:  # newline
            lines -= 1
            if lines == 0:
                return False
    return False


def elf_kind(head):
    """An ELF header's (class: 1 32-bit / 2 64-bit, byte order, e_type, e_machine), or None."""
    if len(head) < 20 or not head.startswith(b"\x7fELF"):
        return None
    order = "big" if head[5] == 2 else "little"
    return head[4], head[5], int.from_bytes(head[16:18], order), int.from_bytes(head[18:20], order)


def host_elf_kind():
    """This Python's own ELF kind: what this host's kernel runs natively, or None."""
    for path in ("/proc/self/exe", os.path.realpath(sys.executable or "")):
        kind = elf_kind(read_head(path, 20) or b"")
        if kind is not None:
            return kind
    return None


def start_problem(name, path):
    """Why the kernel would not start the program at ``path``, or None.

    torchrun starts a ``--no-python`` program itself (Popen), without the shell's
    fallback to ``/bin/sh`` for a file the kernel refuses (ENOEXEC): every rank then
    failed with "Exec format error" and a traceback. A ``#!`` line must name an
    interpreter that is there; a binary must be one this host runs.
    """
    try:
        with open(path, "rb") as handle:
            head = handle.read(256)
    except OSError as exc:
        return "program %r cannot be read here (%s)" % (name, exc.strerror)
    if head.startswith(b"#!"):
        return _interpreter_problem(name, head)
    if looks_binary(head):
        return binary_problem(name, head)
    return (
        "program %r has no #! line; torchrun starts it without a shell (Exec format "
        "error): make its first line #!/bin/sh (or the interpreter it needs)" % name
    )


def shebang_interpreter(head):
    """The program the ``#!`` line at the start of ``head`` names, or None."""
    words = head[2:].split(b"\n", 1)[0].split() if head.startswith(b"#!") else []
    return words[0].decode("utf-8", "replace") if words else None


def _interpreter_problem(name, head):
    interpreter = shebang_interpreter(head) or ""
    if not (os.path.isfile(interpreter) and os.access(interpreter, os.X_OK)):
        return "program %r: its #! interpreter %r is not here; fix its #! line" % (
            name,
            interpreter,
        )
    return None


def binary_problem(name, head):
    """Why the kernel here would refuse the binary ``head`` starts (ENOEXEC), or None."""
    kind = elf_kind(head)
    if kind is None:
        if binfmt_runs(head):
            return None
        return (
            "program %r is a binary file but not an ELF program (Exec format error): name "
            "a program built for this host" % name
        )
    if kind[2] not in (2, 3):  # ET_EXEC, ET_DYN: a relocatable object or a core is not run
        return "program %r is an ELF object or core file, not a program; link it" % name
    host = host_elf_kind()
    if host is None or _runs_natively(kind, host) or binfmt_runs(head):
        return None
    here = _machine_name(host)
    return "program %r is built for %s; this host is %s (Exec format error): %s" % (
        name,
        _machine_name(kind),
        here,
        "install or build it for " + here,
    )


def _runs_natively(kind, host):
    """Whether the host's kernel runs ``kind`` itself: the same machine, class and byte
    order, or a 32-bit machine its 64-bit one runs in compat mode."""
    if kind[1] != host[1]:
        return False
    if kind[0] == host[0]:
        return kind[3] == host[3]
    return kind[0] == 1 and kind[3] in RUNS_32_BIT.get(host[3], ())


def _machine_name(kind):
    bits = "32-bit" if kind[0] == 1 else "64-bit"
    return "%s %s" % (bits, MACHINES.get(kind[3], "machine %d" % kind[3]))


def binfmt_runs(head, folder=BINFMT_MISC):
    """Whether an enabled binfmt_misc entry here matches ``head`` by its magic (qemu-user
    registers one per foreign machine: such a binary runs)."""
    if (read_head(os.path.join(folder, "status")) or b"").strip() != b"enabled":
        return False
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    for name in names:
        if name not in ("register", "status"):
            entry = (read_head(os.path.join(folder, name), 4096) or b"").decode("ascii", "replace")
            if _binfmt_matches(entry.splitlines(), head):
                return True
    return False


def _binfmt_matches(lines, head):
    """An entry file's lines (``enabled``, ``offset N``, ``magic HEX``, ``mask HEX``)
    against ``head``, as the kernel's magic test: (byte & mask) == (magic & mask)."""
    fields = dict(line.partition(" ")[::2] for line in lines[1:])
    if not lines or lines[0] != "enabled" or "magic" not in fields:
        return False
    try:
        offset, magic = int(fields.get("offset", "0")), bytes.fromhex(fields["magic"])
        mask = bytes.fromhex(fields.get("mask", "ff" * len(magic)))
    except ValueError:
        return False
    data = head[offset : offset + len(magic)]
    if not len(data) == len(magic) == len(mask):  # the kernel's mask is as long as the magic
        return False
    return all(data[i] & mask[i] == magic[i] & mask[i] for i in range(len(magic)))
