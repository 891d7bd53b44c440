"""Run a command where /etc/ssh and ssh's home directory are a test's own directories.

ssh reads /etc/ssh/ssh_config and ``~/.ssh/config`` from fixed places (the home
from the password database, not ``$HOME``), so a test of what it reads there
gives it a mount namespace of its own (``unshare --mount``, root only): the
test's directory is bind-mounted over /etc/ssh, and a copy of /etc/passwd that
gives the user the test's home over /etc/passwd, for the command and its
children alone (``$HOME`` too, which ssh's Include globs use). The machine's
files are never touched; the home itself is not mounted over, so programs
installed under it (a pyenv Python in /root) still run.

:func:`small_tmp` gives a command a small tmpfs as /tmp the same way (a host whose /tmp
fills: torchrun's per-rank files live there).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path


def why_not() -> str | None:
    """The skip reason where no mount namespace can be made."""
    if os.geteuid() != 0:
        return "bind-mounting over /etc/ssh needs root"
    if shutil.which("unshare") is None:
        return "unshare not installed (Debian/Ubuntu package util-linux)"
    return None


def ssh_dirs(tmp_path: Path, system: dict[str, str], user: dict[str, str]) -> list[str]:
    """The argv prefix that runs a command with ``system`` as /etc/ssh's files and
    ``user`` as ``~/.ssh``'s (name -> text; a name may have a directory)."""
    etc, home = tmp_path / "etc_ssh", tmp_path / "home"
    for root, files in ((etc, system), (home / ".ssh", user)):
        root.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
    passwd = tmp_path / "passwd"
    passwd.write_text("".join(_with_home(line, home) for line in _read("/etc/passwd")))
    script = (
        'mount --bind "$1" /etc/ssh && mount --bind "$2" /etc/passwd && HOME="$3" && '
        'export HOME && shift 3 && exec "$@"'
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    return [*unshare, "sh", "-c", script, "sh", str(etc), str(passwd), str(home)]


def _read(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return handle.readlines()


def _with_home(line: str, home: Path) -> str:
    """A passwd line, with ``home`` as its home where it is this user's."""
    fields = line.rstrip("\n").split(":")
    if len(fields) == 7 and fields[2] == str(os.getuid()):
        fields[5] = str(home)
    return ":".join(fields) + "\n"


def small_tmp(mount_point: Path, size: str, keep: Sequence[Path]) -> list[str]:
    """The argv prefix that runs a command with a tmpfs of ``size`` (``256k``) as /tmp, in a
    mount namespace of its own: what a host with a small or full /tmp looks like.

    The folders of ``keep`` that lie under /tmp (a cluster's sshd files, a checkout or a
    venv: where a clean clone is tested) are bound into it at their places, so they stay
    there and take none of its room. ``mount_point``: an empty folder to make it on first
    (it is then moved over /tmp).
    """
    mount_point.mkdir(parents=True, exist_ok=True)
    kept = _outermost(sorted({path.resolve() for path in keep if _under_tmp(path.resolve())}))
    script = (
        'new="$1" && mount -t tmpfs -o "size=$2,mode=1777" tmpfs "$new" && shift 2 && '
        'while [ "$1" != -- ]; do mkdir -p "$new${1#/tmp}" && '
        'mount --bind "$1" "$new${1#/tmp}" && shift; done && shift && '
        'mount --move "$new" /tmp && exec "$@"'
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    return [*unshare, "sh", "-c", script, "sh", str(mount_point), size, *map(str, kept), "--"]


def _under_tmp(path: Path) -> bool:
    return path.is_relative_to("/tmp") and path != Path("/tmp")


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` without those inside another of them (a bind brings what is below it)."""
    return [p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)]


def without_a_user(tmp_path: Path) -> list[str]:
    """The argv prefix that runs a command as this uid with no name: no line of the
    password database (``passwd: files`` alone, since nss-systemd makes one up for root
    and nobody), no ``USER`` or ``LOGNAME``: a container's bare ``docker --user 12345``."""
    passwd, nsswitch = tmp_path / "passwd", tmp_path / "nsswitch.conf"
    uid = str(os.getuid())
    lines = [line for line in _read("/etc/passwd") if line.split(":")[2:3] != [uid]]
    passwd.write_text("".join(lines))
    nsswitch.write_text("passwd: files\ngroup: files\nhosts: files dns\n")
    script = (
        'mount --bind "$1" /etc/passwd && mount --bind "$2" /etc/nsswitch.conf && '
        'shift 2 && exec "$@"'
    )
    unshare = ["unshare", "--mount", "--propagation", "private"]
    no_names = ["env", "-u", "USER", "-u", "LOGNAME"]
    return [*unshare, "sh", "-c", script, "sh", str(passwd), str(nsswitch), *no_names]
