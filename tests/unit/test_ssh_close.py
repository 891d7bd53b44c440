"""Closing a paramiko connection: every hop closed, the jump host released, nothing raised."""

from __future__ import annotations

import paramiko
import pytest

from clusterlaunch.transport.settings import SshSettings
from clusterlaunch.transport.ssh import SshConnection


class _Client:
    def __init__(self, name: str, closed: list[str], error: BaseException | None = None) -> None:
        self.name, self.closed, self.error = name, closed, error

    def close(self) -> None:
        self.closed.append(self.name)
        if self.error is not None:
            raise self.error


@pytest.mark.parametrize(
    "error", [EOFError(), BrokenPipeError(), paramiko.SSHException("gone")], ids=repr
)
def test_a_hop_that_fails_to_close_stops_nothing(error: BaseException) -> None:
    """Behind a jump host, closing the target sends on the jump host's connection: that
    connection failing then raised EOFError out of a finished exec (a traceback)."""
    closed: list[str] = []
    released: list[int] = []
    clients = [_Client("jump", closed), _Client("target", closed, error)]
    connection = SshConnection("t", clients, SshSettings(), lambda: released.append(1))  # type: ignore[arg-type]
    connection.close()
    connection.close()
    assert closed == ["target", "jump"] and released == [1]
