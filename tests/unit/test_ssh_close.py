"""Closing a paramiko connection or command: every hop closed, the jump host released,
nothing raised (a close sends a message, on a connection that may be failing)."""

from __future__ import annotations

import paramiko
import pytest

from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.settings import SshSettings
from clusterlaunch.transport.ssh import SshConnection, SshProcess, close_quietly


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
    connection = SshConnection(
        SshTarget(alias="t", hostname="h"), clients, SshSettings(), lambda: released.append(1)
    )  # type: ignore[arg-type]
    connection.close()
    connection.close()
    assert closed == ["target", "jump"] and released == [1]


class _Channel:
    def __init__(self, error: BaseException) -> None:
        self.error, self.closes = error, 0

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        self.closes += 1
        raise self.error


@pytest.mark.parametrize("error", [EOFError(), ConnectionResetError()], ids=repr)
def test_closing_a_command_on_a_failing_connection_raises_nothing(error: BaseException) -> None:
    channel = _Channel(error)
    SshProcess(channel).close()  # type: ignore[arg-type]
    assert channel.closes == 1


def test_only_a_connections_errors_are_quiet() -> None:
    """A failed connection is reported where it is used; a bug in a close is not hidden."""
    close_quietly(_Channel(EOFError()))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        close_quietly(_Channel(ValueError("a bug")))  # type: ignore[arg-type]
