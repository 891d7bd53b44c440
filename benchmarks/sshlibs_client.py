"""``python -m benchmarks.sshlibs_client LIBRARY SPEC.json OUT.json``: one library's connects.

Connects to every host of ``SPEC.json`` at once with one SSH library, checks
the host key against the cluster's known_hosts, authenticates with the
cluster's ed25519 key, runs ``true`` and waits for its exit status, then writes
to ``OUT.json`` the process's own CPU for that (``RUSAGE_SELF``, every thread)
and, apart, the CPU of importing the library. The interpreter's start is in
neither. Every library gets the same algorithms (what paramiko picks by default
against OpenSSH): curve25519 key exchange, ed25519 host key, aes128-ctr,
hmac-sha2-256, ``TCP_NODELAY``; so what differs is each library's protocol code,
not its cryptography.

* ``clusterlaunch``: its paramiko transport, as every ``run`` and ``exec``
  connects (``connect_all``: the SSH config resolved before the clock starts,
  a thread per connect, a keepalive thread per connection, ``start("true")``);
* ``paramiko``: ``Transport`` by hand, a thread per host;
* ``asyncssh``: one asyncio loop for all hosts, no thread;
* ``libssh`` (``ssh-python``) and ``libssh2`` (``ssh2-python``): C libraries,
  a thread per host (their blocking calls release the GIL).
"""

from __future__ import annotations

import json
import resource
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

KEX, CIPHER, MAC, HOST_KEY = "curve25519-sha256", "aes128-ctr", "hmac-sha2-256", "ssh-ed25519"
Spec = dict[str, Any]


def cpu_s() -> float:
    """This process's CPU so far, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def tcp(addr: str, port: int) -> socket.socket:
    """A connected socket with Nagle off, as clusterlaunch's transport makes them."""
    sock = socket.create_connection((addr, port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def by_threads(one: Callable[[dict[str, Any]], int], spec: Spec) -> list[int]:
    """``one(host)`` for every host, each in a thread of its own; their exit statuses.

    A host's error is raised here (a thread's exception, SystemExit too, would
    otherwise only be printed, or not even that).
    """
    statuses: list[int] = []
    errors: list[BaseException] = []

    def run(host: dict[str, Any]) -> None:
        try:
            statuses.append(one(host))
        except BaseException as exc:  # handed to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(host,)) for host in spec["hosts"]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return statuses


def with_paramiko(spec: Spec) -> Callable[[], list[int]]:
    """paramiko's Transport, a thread per host (without ``invoke``, as in clusterlaunch)."""
    sys.modules.setdefault("invoke", None)  # type: ignore[arg-type]  # see transport/noinvoke.py
    import paramiko

    key = paramiko.Ed25519Key.from_private_key_file(spec["key"])
    known = paramiko.HostKeys(spec["known_hosts"])

    def one(host: dict[str, Any]) -> int:
        transport = paramiko.Transport(tcp(host["addr"], host["port"]))
        options = transport.get_security_options()
        options.kex, options.key_types = ("curve25519-sha256@libssh.org",), (HOST_KEY,)
        options.ciphers, options.digests = (CIPHER,), (MAC,)
        transport.start_client()
        if not known.check(f"[{host['addr']}]:{host['port']}", transport.get_remote_server_key()):
            raise SystemExit(f"host key of {host['addr']} not in known_hosts")
        transport.auth_publickey(spec["user"], key)
        channel = transport.open_session()
        channel.exec_command("true")
        status = channel.recv_exit_status()
        transport.close()
        return status

    return lambda: by_threads(one, spec)


def with_asyncssh(spec: Spec) -> Callable[[], list[int]]:
    """asyncssh: every host on one event loop."""
    import asyncio

    import asyncssh

    key = asyncssh.read_private_key(spec["key"])

    async def one(host: dict[str, Any]) -> int:
        async with asyncssh.connect(
            sock=tcp(host["addr"], host["port"]), host=host["addr"], port=host["port"],
            username=spec["user"], client_keys=[key], known_hosts=spec["known_hosts"],
            kex_algs=[KEX], server_host_key_algs=[HOST_KEY], encryption_algs=[CIPHER],
            mac_algs=[MAC], compression_algs=None, agent_path=None, config=None,
        ) as connection:  # fmt: skip
            done = await connection.run("true")
            return done.exit_status or 0

    async def every() -> list[int]:
        return list(await asyncio.gather(*(one(host) for host in spec["hosts"])))

    return lambda: asyncio.run(every())


def with_libssh(spec: Spec) -> Callable[[], list[int]]:
    """libssh through ssh-python, a thread per host."""
    from ssh import key as sshkey
    from ssh import options
    from ssh.session import Session

    key = sshkey.import_privkey_file(spec["key"])

    def one(host: dict[str, Any]) -> int:
        session = Session()
        session.options_set_int_val(options.PROCESS_CONFIG, 0)  # no ~/.ssh/config
        session.options_set(options.HOST, host["addr"])
        session.options_set_port(host["port"])
        session.options_set(options.USER, spec["user"])
        session.options_set(options.KNOWNHOSTS, spec["known_hosts"])
        session.options_set(options.GLOBAL_KNOWNHOSTS, "/dev/null")
        for option, value in ((options.KEY_EXCHANGE, KEX), (options.HOSTKEYS, HOST_KEY)):
            session.options_set(option, value)
        for option in (options.CIPHERS_C_S, options.CIPHERS_S_C):
            session.options_set(option, CIPHER)
        for option in (options.HMAC_C_S, options.HMAC_S_C):
            session.options_set(option, MAC)
        session.options_set_int_val(options.NODELAY, 1)
        session.connect()
        if not session.is_server_known():  # True only when known_hosts holds this key
            raise SystemExit(f"host key of {host['addr']} not in known_hosts")
        session.userauth_publickey(key)
        channel = session.channel_new()
        channel.open_session()
        channel.request_exec("true")
        while channel.read()[0] > 0:
            pass
        status = int(channel.get_exit_status())
        channel.close()
        session.disconnect()
        return status

    return lambda: by_threads(one, spec)


def with_libssh2(spec: Spec) -> Callable[[], list[int]]:
    """libssh2 through ssh2-python, a thread per host."""
    from ssh2 import knownhost
    from ssh2 import session as ssh2session

    methods = [
        (ssh2session.LIBSSH2_METHOD_KEX, KEX),
        (ssh2session.LIBSSH2_METHOD_HOSTKEY, HOST_KEY),
        (ssh2session.LIBSSH2_METHOD_CRYPT_CS, CIPHER),
        (ssh2session.LIBSSH2_METHOD_CRYPT_SC, CIPHER),
        (ssh2session.LIBSSH2_METHOD_MAC_CS, MAC),
        (ssh2session.LIBSSH2_METHOD_MAC_SC, MAC),
    ]
    plain = knownhost.LIBSSH2_KNOWNHOST_TYPE_PLAIN | knownhost.LIBSSH2_KNOWNHOST_KEYENC_RAW

    def one(host: dict[str, Any]) -> int:
        sock = tcp(host["addr"], host["port"])
        session = ssh2session.Session()
        for method, value in methods:
            session.method_pref(method, value)
        session.handshake(sock)
        known = session.knownhost_init()
        known.readfile(spec["known_hosts"])
        server_key, _ = session.hostkey()
        known.checkp(host["addr"].encode(), host["port"], server_key, plain)  # raises unless known
        session.userauth_publickey_fromfile(spec["user"], spec["key"])
        channel = session.open_session()
        channel.execute("true")
        while channel.read()[0] > 0:
            pass
        channel.wait_eof()
        channel.close()
        channel.wait_closed()
        status = int(channel.get_exit_status())
        session.disconnect()
        sock.close()
        return status

    return lambda: by_threads(one, spec)


def wait_for_all(processes: list[Any]) -> None:
    """Until every process has finished, read by the controller's own read loop
    (``readloop.read_round``): each when its descriptor is readable, and asked whether
    it has finished only then (asking every process on every wake-up would make the
    wait grow with the square of the hosts)."""
    from clusterlaunch.controller.readloop import read_round

    running = dict(enumerate(processes))

    def take(key: int, out: bytes, err: bytes) -> None:
        if running[key].finished():
            del running[key]

    while running:
        read_round(list(running.items()), 0.05, take, everyone=False)


def with_clusterlaunch(spec: Spec) -> Callable[[], list[int]]:
    """clusterlaunch's paramiko transport, as ``exec`` connects and starts.

    The modules ``connect_all`` imports on first use are imported here, with the
    library, and the hosts resolved through the SSH config: both before the clock.
    """
    import importlib

    from clusterlaunch.core.model import HostSpec
    from clusterlaunch.transport import SshSettings, close_all, connect_all
    from clusterlaunch.transport.sshconfig import resolve_targets

    for module in ("hostkeys", "identities", "sshcompat", "sshconnect"):
        importlib.import_module(f"clusterlaunch.transport.{module}")
    importlib.import_module("clusterlaunch.controller.readloop")  # wait_for_all's

    specs = [HostSpec(host=host["alias"], gpus=1) for host in spec["hosts"]]
    targets = resolve_targets(spec["ssh_config"], specs)
    settings = SshSettings(config_path=spec["ssh_config"])

    def every() -> list[int]:
        connections, problems = connect_all(targets, settings)
        if problems:
            raise SystemExit(f"clusterlaunch could not connect: {problems}")
        processes = [connection.start("true") for connection in connections.values()]
        wait_for_all(processes)
        statuses = [process.exit_status() for process in processes]
        close_all(connections)
        return [-1 if status is None else status for status in statuses]

    return every


LIBRARIES: dict[str, Callable[[Spec], Callable[[], list[int]]]] = {
    "clusterlaunch": with_clusterlaunch,
    "paramiko": with_paramiko,
    "asyncssh": with_asyncssh,
    "libssh": with_libssh,
    "libssh2": with_libssh2,
}


def main(argv: list[str]) -> None:
    """Import, connect everywhere, write the record."""
    library, spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as spec_file:
        spec = json.load(spec_file)
    before = cpu_s()
    try:
        connect_every = LIBRARIES[library](spec)  # imports the library, loads the key
    except ImportError as exc:
        raise SystemExit(f"{library}: {exc} (pip install -e '.[bench]')") from None
    imported, started = cpu_s(), time.perf_counter()
    statuses = connect_every()
    record = {
        "import_cpu_s": imported - before,
        "cpu_s": cpu_s() - imported,
        "wall_s": time.perf_counter() - started,
        "statuses": statuses,
    }
    with open(out_path, "w", encoding="utf-8") as out:
        json.dump(record, out)


if __name__ == "__main__":
    main(sys.argv[1:])
