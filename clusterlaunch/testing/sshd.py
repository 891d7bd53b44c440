"""One simulated host's parts: its sshd and client config templates, ports, errors.

Used by :mod:`clusterlaunch.testing.loopback` (and the network-namespace tier in
``tests/netns.py``). Stdlib only.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from clusterlaunch.core.defaults import SANDBOX_FIRST_PORT

SSHD = "/usr/sbin/sshd"
DEFAULT_PORT = SANDBOX_FIRST_PORT
STATE_FILE = "simcluster.json"


class SimClusterError(RuntimeError):
    """A simulated cluster could not be started or stopped."""


class PortInUseError(SimClusterError):
    """The requested port is already taken on one of the cluster's addresses."""


@dataclass(frozen=True)
class SimHost:
    """One simulated host: ssh alias *name* reaches sshd (PID *pid*) at *addr*:*port*.

    *marker* is the ``CLUSTERLAUNCH_SIM_HOST`` value of its sessions; *host_dir* holds its
    host key, sshd_config and logs (``sshd.log``, ``sshd.stderr``).
    """

    name: str
    addr: str
    port: int
    marker: str
    host_dir: Path
    pid: int | None = None


def port_is_free(addrs: Iterable[str], port: int) -> bool:
    """True when *port* can be bound (as sshd binds it) on every address in *addrs*."""
    for addr in addrs:
        with socket.socket() as sock:
            # sshd sets SO_REUSEADDR too, so TIME_WAIT leftovers do not count as taken.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((addr, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False
                raise
    return True


def find_free_port(addrs: Iterable[str], start: int = DEFAULT_PORT, attempts: int = 200) -> int:
    """First port from *start* upward that is free on all *addrs*."""
    wanted = list(addrs)
    for port in range(start, start + attempts):
        if port_is_free(wanted, port):
            return port
    raise PortInUseError(f"no free port in {start}..{start + attempts - 1} on {wanted}")


def make_private_dir(path: Path, children: Iterable[Path] = ()) -> None:
    """``path`` and ``children`` in it (mode 0700) and its missing parents, none writable by
    others whatever the umask: each host's sshd reads the login keys in it at every login,
    with ``StrictModes no`` (it may be under /tmp), so whoever could write in it could log
    in as this user."""
    missing = [place for place in (path, *path.parents) if not place.exists()]
    for place in reversed(missing):
        place.mkdir(mode=0o755, exist_ok=True)  # the umask only takes bits away
    path.chmod(0o700)
    for child in children:
        child.mkdir(mode=0o700, exist_ok=True)


def write_private(path: Path, data: bytes) -> None:
    """``data`` into ``path``, mode 0600 whatever the umask or the mode it had (never a link
    followed): under umask 000 authorized_keys and sshd_config were 0666."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with open(fd, "wb") as handle:
        os.fchmod(fd, 0o600)
        handle.write(data)


# curve25519-sha256@libssh.org is the same exchange under its pre-RFC name: paramiko
# (used by the product) knows only that name, OpenSSH's client prefers the RFC one.
# ListenAddress in brackets: sshd takes them around any address, and needs them around
# an IPv6 one (the namespace tier's IPv6 hosts).
SSHD_CONFIG_TEMPLATE = """\
ListenAddress [{addr}]:{port}
HostKey {host_key}
PidFile {pid_file}
AuthorizedKeysFile {authorized_keys}
UsePAM no
StrictModes no
UseDNS no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
MaxStartups 200:30:400
MaxSessions 100
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
Subsystem sftp internal-sftp
PrintMotd no
PrintLastLog no
SetEnv {var}={marker}{more_env}
"""

SSH_HOST_BLOCK = """\
Host {name}
    HostName {addr}
    Port {port}
    User {user}
    IdentityFile {client_key}
    IdentitiesOnly yes
    UserKnownHostsFile {known_hosts}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    UpdateHostKeys no
    KexAlgorithms curve25519-sha256
    BatchMode yes
    LogLevel ERROR
"""


MAX_POSITION = 254 * 64
"""Host positions go up to 127.0.63.254 (thousands of hosts; sshd's memory runs out first)."""


def loopback_addr(position: int) -> str:
    """127.0.0.``position`` up to .254, then 127.0.1.1, 127.0.1.2, ... (no .0, no .255)."""
    if position <= 254:
        return f"127.0.0.{position}"
    block, offset = divmod(position - 255, 254)
    return f"127.0.{block + 1}.{offset + 1}"


def loopback_addrs(n_hosts: int, first_host_octet: int = 11) -> list[str]:
    """The addresses of a cluster's ``n_hosts`` hosts (for a free-port search before start)."""
    return [loopback_addr(first_host_octet + index) for index in range(n_hosts)]
