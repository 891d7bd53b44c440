"""An SFTP upload whose local file went away blames this machine, not the host: it said
"sftp: cannot write HOST_PATH: No such file or directory" of a directory that existed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.core.errors import TransportError
from clusterlaunch.transport.files import SftpFiles


class _OpensItsSource:
    """An SFTP client as far as put goes: it opens the local file first, as paramiko's."""

    def __init__(self) -> None:
        self.removed: list[str] = []

    def put(self, local: str, remote: str, **_: Any) -> None:
        with open(local, "rb"):
            pass

    def remove(self, path: str) -> None:
        self.removed.append(path)


def test_a_local_file_that_went_away_is_named_as_local(tmp_path: Path) -> None:
    gone = str(tmp_path / "d49" / "f0.txt")
    files = SftpFiles("node0", _OpensItsSource())  # type: ignore[arg-type]
    with pytest.raises(TransportError) as raised:
        files.put(gone, "dest/d49/f0.txt", 0o644, 0)
    assert raised.value.detail == f"cannot read {gone} here: No such file or directory"
