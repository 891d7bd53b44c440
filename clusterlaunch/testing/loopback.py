"""Loopback tier: one real OpenSSH sshd per simulated host, host i on 127.0.0.(11+i).

Past 127.0.0.254 the hosts go on at 127.0.1.1, 127.0.1.2, ... (every address of
127.0.0.0/8 is this machine's), so a cluster can have hundreds of hosts.

Works as root and as an ordinary user (then every host logs in as that same user).  All
files live under ``base_dir``; the client side (key, known_hosts, ssh_config) is generated
from the host keys directly, so no ssh-keyscan and no trust-on-first-use is involved.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, TypeVar

from clusterlaunch.testing import orphans, sshd
from clusterlaunch.testing.sshd import (
    DEFAULT_PORT,
    MAX_POSITION,
    SSH_HOST_BLOCK,
    SSHD,
    SSHD_CONFIG_TEMPLATE,
    STATE_FILE,
    PortInUseError,
    SimClusterError,
    SimHost,
    loopback_addr,
    port_is_free,
)

_C = TypeVar("_C", bound="LoopbackCluster")


class LoopbackCluster:
    """N real sshd servers on 127.0.0.(first_host_octet+i), all on one port.

    The constructor only computes names and paths; ``start()`` writes keys and configs,
    launches sshd and waits until every host accepts TCP connections; ``stop()`` (also
    called on a failed start and by the context manager) stops every sshd of the cluster.
    Sessions started through the hosts are not touched by ``stop()``: tests find them
    with :func:`clusterlaunch.testing.orphans.find_processes` and ``markers()``.
    """

    def __init__(
        self,
        n_hosts: int,
        base_dir: str | os.PathLike[str],
        port: int = DEFAULT_PORT,
        first_host_octet: int = 11,
        name_prefix: str = "node",
        *,
        ready_timeout: float = 15.0,
        detached: bool = False,
        login_rc: bool = True,
    ) -> None:
        if n_hosts < 1 or first_host_octet < 2 or first_host_octet + n_hosts > MAX_POSITION:
            raise ValueError(f"cannot place {n_hosts} hosts from 127.0.0.{first_host_octet}")
        self.n_hosts = n_hosts
        self.base_dir = Path(base_dir).absolute()
        self.port = port
        self.first_host_octet = first_host_octet
        self.name_prefix = name_prefix
        self.ready_timeout = ready_timeout
        # detached: sshd gets its own session so that it outlives the starting process.
        self.detached = detached
        self.more_env = "" if login_rc else " SHLVL=1"  # sshd SetEnv: bash skips ~/.bashrc
        self.cluster_id = secrets.token_hex(6)
        self.user = pwd.getpwuid(os.getuid()).pw_name
        self.ssh_config = self.base_dir / "ssh_config"
        self.known_hosts = self.base_dir / "known_hosts"
        self.client_key = self.base_dir / "client_ed25519"
        self.authorized_keys = self.base_dir / "authorized_keys"
        self.state_file = self.base_dir / STATE_FILE
        self._pids: dict[str, tuple[int, int | None]] = {}

    # -- naming -------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """SSH aliases of the hosts, in order."""
        return [f"{self.name_prefix}{i}" for i in range(self.n_hosts)]

    def _addr(self, index: int) -> str:
        return loopback_addr(self.first_host_octet + index)

    def markers(self) -> list[str]:
        """The ``CLUSTERLAUNCH_SIM_HOST`` values of all hosts (unique to this instance)."""
        return [f"{self.cluster_id}-{name}" for name in self.names]

    @property
    def hosts(self) -> list[SimHost]:
        """All hosts; ``pid`` is None for hosts not running (not started, or killed)."""
        pids = {name: pid for name, (pid, _) in self._pids.items()}
        return [
            SimHost(name, self._addr(i), self.port, marker, self.base_dir / name, pids.get(name))
            for i, (name, marker) in enumerate(zip(self.names, self.markers(), strict=True))
        ]

    def host(self, name: str) -> SimHost:
        """The host with ssh alias *name*."""
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def ssh_argv(self, host_name: str) -> list[str]:
        """OpenSSH client argv prefix reaching *host_name* through this cluster's config."""
        return ["ssh", "-F", str(self.ssh_config), host_name]

    # -- files ----------------------------------------------------------------------------
    def _write_files(self) -> None:
        hosts = self.hosts
        sshd.make_private_dir(self.base_dir, [h.host_dir for h in hosts])  # files: 0600
        keys = [self.client_key] + [h.host_dir / "ssh_host_ed25519_key" for h in hosts]
        # One ssh-keygen per key, all at once: serially they dominate the start time.
        # Keys already present are reused, which makes restarts in the same dir cheap.
        keygen = ["ssh-keygen", "-t", "ed25519", "-N", "", "-q", "-C", "simcluster", "-f"]
        procs = [
            subprocess.Popen([*keygen, str(key)], stdin=subprocess.DEVNULL, umask=0o077)
            for key in keys
            if not (key.exists() and key.with_suffix(".pub").exists())
        ]
        if any(p.wait() != 0 for p in procs):
            raise SimClusterError("ssh-keygen failed")
        sshd.write_private(self.authorized_keys, self.client_key.with_suffix(".pub").read_bytes())
        known, client = [], []
        for host in hosts:
            key = (host.host_dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            # OpenSSH writes non-default ports as [addr]:port in known_hosts.
            where = host.addr if host.port == 22 else f"[{host.addr}]:{host.port}"
            known.append(f"{where} {key[0]} {key[1]}\n")
            fields = dict(
                vars(host), user=self.user, var=orphans.MARKER_VAR, more_env=self.more_env,
                host_key=_q(host.host_dir / "ssh_host_ed25519_key"),
                pid_file=_q(host.host_dir / "sshd.pid"), client_key=_q(self.client_key),
                known_hosts=_q(self.known_hosts), authorized_keys=_q(self.authorized_keys),
            )  # fmt: skip
            client.append(SSH_HOST_BLOCK.format(**fields))
            config = SSHD_CONFIG_TEMPLATE.format(**fields).encode()
            sshd.write_private(host.host_dir / "sshd_config", config)
        sshd.write_private(self.known_hosts, "".join(known).encode())
        sshd.write_private(self.ssh_config, "".join(client).encode())

    def write_hosts_yaml(
        self, path: str | os.PathLike[str], gpus: int = 1, **defaults: Any
    ) -> Path:
        """Write a clusterlaunch hosts file listing every host with *gpus* GPUs.

        Keyword arguments become the file's ``defaults:`` mapping.  Values are written as
        JSON scalars/flow collections, which YAML reads unchanged.
        """
        lines = ["hosts:\n"]
        lines += [f"  - host: {json.dumps(h)}\n    gpus: {int(gpus)}\n" for h in self.names]
        if defaults:
            lines.append("defaults:\n")
            lines += [f"  {k}: {json.dumps(v, default=str)}\n" for k, v in defaults.items()]
        out = Path(path)
        out.write_text("".join(lines))
        return out

    # -- lifecycle ------------------------------------------------------------------------
    def _setup_network(self) -> None:
        addrs = [h.addr for h in self.hosts]
        if not port_is_free(addrs, self.port):
            raise PortInUseError(
                f"port {self.port} is already in use on one of {addrs[0]}..{addrs[-1]} "
                "(another simulated cluster or a leftover sshd?); choose another port"
            )

    def _teardown_network(self) -> list[orphans.ProcInfo]:
        """Hook for tiers that create network resources; returns processes it killed."""
        return []

    def _launch_prefix(self, host: SimHost) -> list[str]:
        """Hook: argv placed before sshd's (e.g. to enter a namespace)."""
        return []

    def start(self: _C) -> _C:
        """Generate files, start every sshd and wait until all accept connections."""
        if self._pids:
            raise SimClusterError("cluster already started")
        if not os.path.isdir("/run/sshd") and os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privsep chroot dir
        try:
            self._setup_network()
            self._write_files()
            for host in self.hosts:
                self._spawn(host)
            self._wait_ready()
            self._write_state()
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, host: SimHost) -> None:
        conf, log = host.host_dir / "sshd_config", host.host_dir / "sshd.log"
        argv = [*self._launch_prefix(host), SSHD, "-D", "-f", str(conf), "-E", str(log)]
        # stdout/stderr (errors before -E takes effect) go to a file next to the log.
        err = str(host.host_dir / "sshd.stderr")
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, err, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
                   (os.POSIX_SPAWN_DUP2, 1, 2)]  # fmt: skip
        (host.host_dir / "sshd.pid").unlink(missing_ok=True)  # see _wait_ready
        pid = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions, setsid=self.detached)
        self._pids[host.name] = (pid, orphans.start_time(pid))

    def _wait_ready(self) -> None:
        """Wait until every sshd listens (its PidFile names it) and accepts connections.

        sshd writes its PidFile only after listen() succeeded.  Checking it matters: when
        two clusters race for one port, a connect alone can succeed against the *other*
        cluster's sshd while ours is about to fail with "Address already in use".
        """
        pending = self.hosts
        deadline = time.monotonic() + self.ready_timeout
        while pending:
            for host in list(pending):
                pid, starttime = self._pids[host.name]
                if orphans.has_exited(pid, starttime):
                    del self._pids[host.name]
                    raise self._startup_error(host, "sshd exited during startup")
                try:
                    if int((host.host_dir / "sshd.pid").read_text()) != pid:
                        continue
                except (OSError, ValueError):  # not written (completely) yet
                    continue
                try:
                    socket.create_connection((host.addr, host.port), timeout=1.0).close()
                except OSError:
                    continue
                pending.remove(host)
            if pending:
                if time.monotonic() > deadline:
                    raise self._startup_error(pending[0], f"not up in {self.ready_timeout}s")
                time.sleep(0.005)

    def _startup_error(self, host: SimHost, what: str) -> SimClusterError:
        log = "".join(
            (host.host_dir / f).read_text(errors="replace") if (host.host_dir / f).exists() else ""
            for f in ("sshd.stderr", "sshd.log")
        )[-2000:]
        cls = PortInUseError if "Address already in use" in log else SimClusterError
        return cls(f"{host.name} ({host.addr}:{host.port}): {what}; sshd output:\n{log}")

    def _write_state(self) -> None:
        hosts = [dict(vars(h), host_dir=str(h.host_dir), starttime=self._pids[h.name][1])
                 for h in self.hosts]  # fmt: skip
        state = {"cluster_id": self.cluster_id, "ssh_config": str(self.ssh_config), "hosts": hosts}
        sshd.write_private(self.state_file, (json.dumps(state, indent=2) + "\n").encode())

    def kill_host(self, name: str, *, sessions: bool = True) -> list[orphans.ProcInfo]:
        """Simulate losing host *name*: SIGKILL its sshd listener and connections.

        With *sessions* (default) every process started on that host is SIGKILLed too,
        as a crashed machine would take them down; the killed ones are returned.
        """
        if name not in self._pids:
            raise SimClusterError(f"{name} is not running")
        self._stop_sshd(dict([self._pids.pop(name)]), sig=signal.SIGKILL)
        if not sessions:
            return []
        return orphans.kill_processes(orphans.find_processes([self.host(name).marker]))

    def stop(self) -> list[orphans.ProcInfo]:
        """Stop every sshd of the cluster (idempotent); returns processes it killed.

        The loopback tier leaves sessions alone (tests check them with ``markers()``)
        and returns an empty list.
        """
        try:
            self._stop_sshd(dict(self._pids.values()))
        finally:
            self._pids.clear()
            killed = self._teardown_network()
        return killed

    @staticmethod
    def _stop_sshd(listeners: dict[int, int | None], sig: int = signal.SIGTERM) -> None:
        if left := orphans.stop_trees(listeners, SSHD, sig):
            raise SimClusterError(f"sshd processes {left} survived SIGKILL")

    def __enter__(self: _C) -> _C:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _q(value: object) -> str:
    """Quote a config value for ssh(d)_config when it contains spaces."""
    text = str(value)
    return f'"{text}"' if " " in text else text
