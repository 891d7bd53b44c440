"""A DNS server of the test's own (dnsmasq), made the resolver of a mount namespace.

ssh canonicalizes host names in the DNS, with a trailing dot (``n1.cluster.``),
which /etc/hosts does not answer. A test starts dnsmasq on an address of
127.0.0.0/8 of its own, answering only the names the test gives it (no upstream,
no /etc/hosts), and runs ssh and clusterlaunch where /etc/resolv.conf names that
server: ``unshare --mount`` with the test's file bind-mounted over it, for the
command and its children alone. The machine's resolver is never touched.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

DNSMASQ = "/usr/sbin/dnsmasq"
_TRIES = itertools.count()
"""Addresses tried in this process, so two servers of one test run never collide."""


def why_not() -> str | None:
    """The skip reason where no such server and namespace can be made."""
    if os.geteuid() != 0:
        return "a DNS server on port 53 and a mount namespace need root"
    if shutil.which("unshare") is None:
        return "unshare not installed (Debian/Ubuntu package util-linux)"
    if not os.access(DNSMASQ, os.X_OK):
        return "dnsmasq not installed (Debian/Ubuntu package dnsmasq-base)"
    return None


@contextmanager
def resolver(
    tmp_path: Path, names: Mapping[str, str], cnames: Mapping[str, str] | None = None
) -> Iterator[list[str]]:
    """The argv prefix that runs a command with a resolver answering ``names`` (name ->
    IPv4 address) and ``cnames`` (alias -> name), and nothing else."""
    records = [f"--host-record={name},{addr}" for name, addr in names.items()]
    records += [f"--cname={alias},{name}" for alias, name in (cnames or {}).items()]
    for addr in server_addresses():
        server = _start(tmp_path, records, addr)
        if server is not None:
            break
    else:
        raise RuntimeError("dnsmasq did not start on any address tried")
    prefix = namespace_prefix(tmp_path, addr)
    try:
        _check(prefix, names)
        yield prefix
    finally:
        server.terminate()
        server.wait(timeout=10)


def server_addresses(tries: int = 20) -> Iterator[str]:
    """Addresses of 127.0.0.0/8 for a test's DNS server to try in turn (a taken one,
    another worker's, is passed over by the caller): this process's range, by its PID,
    and none tried before in it, so two servers of one test run never collide."""
    for attempt in range(tries):
        yield f"127.53.{os.getpid() % 250}.{(next(_TRIES) + attempt) % 250 + 1}"


def namespace_prefix(tmp_path: Path, addr: str, timeout_s: int = 1) -> list[str]:
    """The argv prefix that runs a command whose resolver is ``addr``:53 alone, asked once
    per query with ``timeout_s`` to answer."""
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {addr}\noptions timeout:{timeout_s} attempts:1\n")
    script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"'
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]
    return [*prefix, str(conf)]


def _start(tmp_path: Path, records: list[str], addr: str) -> subprocess.Popen[bytes] | None:
    """dnsmasq answering ``records`` alone on ``addr``:53, or None where it could not bind.

    The names are on its command line: it reads files only after dropping root, and a
    test's directory is root's alone."""
    argv = [
        DNSMASQ, "--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-poll",
        "--pid-file=", f"--listen-address={addr}", "--bind-interfaces", "--port=53",
        "--log-facility=-", *records,
    ]  # fmt: skip
    log = (tmp_path / "dnsmasq.log").open("ab")
    server = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return None  # the address is taken (a concurrent test): another one
        if _answers(addr):
            return server
        time.sleep(0.02)
    server.terminate()
    server.wait(timeout=10)
    return None


def _check(prefix: list[str], names: Mapping[str, str]) -> None:
    """The namespace's resolver answers a name as ssh asks it (a trailing dot): else every
    comparison with ssh would pass with both sides unresolved."""
    for name, addr in list(names.items())[:1]:
        argv = [*prefix, "getent", "hosts", name + "."]
        said = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        if said.split()[:1] != [addr]:
            raise RuntimeError(f"the test's resolver did not answer {name}.: {said!r}")


def _answers(addr: str) -> bool:
    """Whether a server listens on ``addr``:53 (UDP): a query for the root's NS."""
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(0.1)
        try:
            sock.sendto(query, (addr, 53))
            return sock.recv(512)[:2] == b"\x12\x34"
        except OSError:
            return False
