"""The small set of primitives the supervisor needs from any transport.

One connection per host; on it, processes started with a shell command and a
stdin payload, whose stdout/stderr are read without blocking. Everything the
supervisor does (start, stream, heartbeat, teardown) is built from these.
"""

from __future__ import annotations

from typing import Protocol


class RemoteProcess(Protocol):
    """A command running on a host."""

    def waitables(self) -> list[int]:
        """File descriptors that become readable when there is output or an exit."""
        ...

    def read(self) -> tuple[bytes, bytes]:
        """Whatever stdout and stderr bytes are available now (never blocks)."""
        ...

    def send(self, data: bytes) -> bool:
        """Write to the process's stdin; False if stdin is gone."""
        ...

    def close_stdin(self) -> None:
        """Send EOF on stdin (the agent tears its job down on EOF)."""
        ...

    def exit_status(self) -> int | None:
        """The exit status once known, else None."""
        ...

    def finished(self) -> bool:
        """Exited, and every byte of output has been read."""
        ...

    def close(self) -> None:
        """Drop the process's channel or pipes (does not signal anything)."""
        ...


class Connection(Protocol):
    """A live connection to one host."""

    host: str

    def start(self, command: str, stdin: bytes = b"") -> RemoteProcess:
        """Run ``command`` through the host's shell and write ``stdin`` to it."""
        ...

    def alive(self) -> bool:
        """False once the host stopped answering keepalives or the link dropped."""
        ...

    def close(self) -> None:
        """Close the connection; every process on it sees EOF."""
        ...
