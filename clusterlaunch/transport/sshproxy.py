"""A ``ProxyCommand`` for paramiko, run as ssh runs it, whose end is noticed at once,
with what it said.

paramiko's own ``ProxyCommand.recv`` loops until it has every byte asked for,
and on the closed pipe of an exited command ``os.read`` returns nothing
forever: it spun a CPU core until the banner timeout, and the failure then
looked like a silent server, which is retried. A dead bastion
(``ProxyCommand ssh -W %h:%p bastion`` with the bastion down) was reported
after 43 s (four tries of 10 s). Here a read returns what is there, as a
socket's does (paramiko's packetizer loops for the rest), and EOF is EOF;
:func:`proxy_failure` turns an exited command into its exit status and the
last lines of its stderr.
"""

from __future__ import annotations

import os
import select
import subprocess
import time

import paramiko

_STDERR_LINES = 3


class ProxyProcess(paramiko.ProxyCommand):
    """paramiko's ProxyCommand with socket-like reads: partial data, and EOF as b"".

    Like :class:`~clusterlaunch.transport.sshsocket.QuickAckSocket`, it notes when it
    last read data (``last_read``), so a talking server is not asked for keepalives.
    """

    last_read: float | None = None

    def __init__(self, command_line: str) -> None:
        # As ssh runs it (sshconnect.c ssh_proxy_connect): "exec COMMAND" by $SHELL -c.
        # paramiko split it with shlex and ran no shell: a redirection ("2>/dev/null"),
        # a pipe, "$VAR" or "~" in it reached the program as an argument.
        self.cmd = [os.environ.get("SHELL") or "/bin/sh", "-c", "exec " + command_line]
        self.process = subprocess.Popen(
            self.cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.timeout: float | None = None

    def recv(self, size: int) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None  # paramiko starts the command with stdout=PIPE
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise TimeoutError  # socket.timeout, as paramiko expects
            ready, _, _ = select.select([stdout], [], [], wait)
            if ready:
                data = os.read(stdout.fileno(), size)  # b"": paramiko raises EOFError
                if data:
                    self.last_read = time.monotonic()  # see sshsocket.last_read
                return data


def proxy_failure(sock: object, command: str) -> str | None:
    """What an exited ProxyCommand said, or None while it runs (or if ``sock`` is none)."""
    if not isinstance(sock, paramiko.ProxyCommand):
        return None
    try:
        # It closed its stdout: exiting, if not gone yet. A proxy still running after
        # this is alive (the server behind it failed), and client.close() ends it.
        status = sock.process.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        return None
    said = b""
    if sock.process.stderr is not None:
        # Not a blocking read to EOF: a child of the command may hold the pipe open.
        os.set_blocking(sock.process.stderr.fileno(), False)
        said = sock.process.stderr.read() or b""
    lines = said.decode("utf-8", "replace").strip().splitlines()[-_STDERR_LINES:]
    detail = "; ".join(line.strip() for line in lines if line.strip()) or "it printed nothing"
    return f"ProxyCommand {command!r} exited with status {status}: {detail}"
