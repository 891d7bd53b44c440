"""SSH through the system OpenSSH client: one master connection per host, sessions over it.

Everything the user's ``ssh`` does, this transport does, because it *is* ssh:
``Include``, host certificates (``@cert-authority``), user certificates, FIDO
keys, GSSAPI, ``Match exec``. Per host, one master connection (``ControlMaster``,
its socket in a private per-job directory, ``ControlPersist no``) is our child
process; every session of the job (preflight, agent, sync, ps/kill) is an
``ssh -o ControlMaster=no`` client multiplexed over it, its stdin/stdout/stderr
our pipes. The master hands those pipes to the remote channel directly, so:

* the agent sees stdin EOF when we close stdin, or when this process dies;
* a silent partition ends the master after ``ServerAliveInterval`` ×
  ``ServerAliveCountMax`` (its sessions exit 255 with it) and :meth:`alive`
  turns False;
* closing the connection ends the master: every remote process sees EOF.

Masters are established by :mod:`clusterlaunch.transport.sshmaster`.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from clusterlaunch.core.commands import for_login_shell
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.sshargv import subsystem_session
from clusterlaunch.transport.local import LocalProcess
from clusterlaunch.transport.proclimit import fork_failure
from clusterlaunch.transport.sshlog import MasterLog

if TYPE_CHECKING:
    import paramiko

_SESSION_REAP_S = 2.0
"""After the master ends, its session clients exit at once (they have nothing to wait for)."""
_MASTER_EXIT_S = 0.5
"""A session that exited 255 waits this long for its master to end too (a lost host)."""


class OpenSshConnection:
    """One host, reached through its master connection."""

    def __init__(
        self,
        host: str,
        master: subprocess.Popen[bytes],
        session_argv: list[str],
        on_close: Callable[[], None],
        master_log: MasterLog | None = None,
        ssh: str = "ssh",
    ) -> None:
        self.host = host
        self._ssh = ssh  # the path of session_argv's first word
        self._master = master
        self._master_log = master_log
        self._session_argv = session_argv  # ends with the options; alias and command follow
        self._on_close = on_close
        self._sessions: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def session_argv(self) -> list[str]:
        """``ssh`` and its options for one more session over the master (rsync's ``--rsh``)."""
        return list(self._session_argv)

    def start(self, command: str, stdin: bytes = b"") -> LocalProcess:
        """Run ``command`` on the host over the master; ``stdin`` is written first."""
        line, sent = for_login_shell(command, stdin)
        popen = self._spawn([*self._session_argv, "--", self.host, line])
        process = SessionProcess(popen, self)
        process.send(sent)
        return process

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP session over the master (``--sync`` where the host has no rsync)."""
        import paramiko  # only here: the OpenSSH client's commands otherwise never need it

        from clusterlaunch.transport.ssh import CONNECTION_ERRORS

        ours, theirs = socket.socketpair()
        try:
            argv = [*subsystem_session(self._session_argv), "--", self.host, "sftp"]
            self._spawn(argv, theirs.fileno(), theirs.fileno())
        finally:
            theirs.close()
        try:
            # paramiko speaks SFTP over anything with send/recv/close/get_name.
            return paramiko.SFTPClient(_SftpStream(ours, self.host))  # type: ignore[arg-type]
        except CONNECTION_ERRORS as exc:
            ours.close()
            raise TransportError(self.host, f"cannot open SFTP: {exc}") from None

    def _spawn(
        self, argv: list[str], stdin: int = subprocess.PIPE, stdout: int = subprocess.PIPE
    ) -> subprocess.Popen[bytes]:
        with self._lock:
            # A session never opens a connection of its own: ssh would fall back
            # to one if the master were gone (a host lost is lost).
            if self._closed or self._master.poll() is not None:
                raise TransportError(self.host, "connection closed")
            try:
                popen = subprocess.Popen(
                    argv,
                    executable=self._ssh,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=subprocess.PIPE if stdout == subprocess.PIPE else subprocess.DEVNULL,
                    # Its own session: a Ctrl-C reaches the controller only, which
                    # then tears every host down the same way.
                    start_new_session=True,
                )
            except OSError as exc:
                raise TransportError(self.host, f"cannot run ssh: {fork_failure(exc)}") from None
            self._sessions = [p for p in self._sessions if p.poll() is None] + [popen]
        return popen

    def alive(self) -> bool:
        """The master is running (it ends on a dropped link or unanswered keepalives)."""
        return not self._closed and self._master.poll() is None

    def lost_because(self, wait: float = 0.0) -> str | None:
        """Why the master ended by itself (its last words), or None while it runs.

        ``wait``: how long a master that is ending may take to exit.
        """
        if self._closed or self._master_log is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._master.wait(wait)
        if self._master.poll() is None:
            return None
        with self._lock:  # close() drops the log only after marking the connection closed
            said = [] if self._closed else self._master_log.said().strip().splitlines()
        return said[-1] if said else f"ssh exited with {self._master.returncode}"

    def close(self) -> None:
        """End the master: the host's sessions all see EOF. Reaps every ssh we started."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sessions = list(self._sessions)
        stop_process(self._master)
        for session in sessions:
            with contextlib.suppress(subprocess.TimeoutExpired):
                session.wait(_SESSION_REAP_S)
            if session.poll() is None:
                stop_process(session)
        if self._master_log is not None:
            self._master_log.close()
        self._on_close()


class _SftpStream:
    """The local end of an ``ssh -s sftp`` session, as paramiko's SFTPClient uses a channel."""

    def __init__(self, sock: socket.socket, host: str) -> None:
        self._sock = sock
        self._name = f"sftp-{host}"

    def send(self, data: bytes) -> int:
        return self._sock.send(data)

    def recv(self, size: int) -> bytes:
        return self._sock.recv(size)

    def close(self) -> None:
        self._sock.close()  # ssh sees EOF and ends the session

    def get_name(self) -> str:
        return self._name


class SessionProcess(LocalProcess):
    """A session over the master: when the master dies under it, its stderr says why.

    (A silent partition ends the master after its keepalives went unanswered;
    the session then exits 255 with nothing else to tell.)
    """

    def __init__(self, popen: subprocess.Popen[bytes], connection: OpenSshConnection) -> None:
        super().__init__(popen)
        self._connection = connection
        self._decided = False
        self._note = b""

    def read(self) -> tuple[bytes, bytes]:
        """Available stdout and stderr; after both, the master's last words if it died."""
        out, err = super().read()
        self._decide()
        note, self._note = self._note, b""
        return out, err + note

    def finished(self) -> bool:
        """Exited with both pipes drained, and any last words read."""
        self._decide()
        return super().finished() and not self._note

    def _decide(self) -> None:
        if self._decided or not super().finished():
            return
        self._decided = True
        if self.exit_status() == 255:
            # The session exits as its master goes, sometimes a moment before it.
            why = self._connection.lost_because(wait=_MASTER_EXIT_S)
            if why is not None:
                self._note = f"connection to {self._connection.host} lost: {why}\n".encode()


def multiplexed_ssh_argv(connection: object) -> list[str] | None:
    """``ssh`` with its options for one more session over ``connection``'s master, if it has one."""
    return connection.session_argv if isinstance(connection, OpenSshConnection) else None


def stop_process(popen: subprocess.Popen[bytes], wait: float = 2.0) -> None:
    """SIGTERM (ssh closes the connection cleanly), SIGKILL if it lingers; reaped."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.terminate()
        try:
            popen.wait(wait)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
