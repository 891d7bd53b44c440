"""Namespace tier: every simulated host is a network namespace on a private bridge.

Root only.  Per cluster instance: a bridge ``clb<id>`` in the root namespace holding
10.250.X.1/24 (X picked among subnets not in use), and per host a namespace
``cl<id>n<i>`` joined to it by a veth pair (root side ``cl<id>v<i>``, namespace side
``eth0``) with address 10.250.X.(10+i).  With ``ipv6=True`` the hosts have IPv6 only:
fd42:X::1/64 on the bridge, fd42:X::(10+i) (hex) on each host, and their names resolve
to those alone.  sshd runs inside the namespace under
``unshare --uts`` with the host's name as hostname, and ``/etc/netns/<ns>/hosts`` maps
every host name to its bridge address, so a host's own name never resolves to 127.0.0.1.
Everything created is removed by ``stop()``, also after a failed or partial start.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from clusterlaunch.testing import orphans
from clusterlaunch.testing.loopback import LoopbackCluster, SimClusterError, SimHost

log = logging.getLogger(__name__)

#: Where ``ip netns exec`` finds the files it bind-mounts over /etc in a namespace.
NETNS_ETC = Path("/etc/netns")


def _ip(*args: str, stdin: str | None = None, check: bool = True) -> str:
    """Run ``ip ARGS``; return stdout, raise SimClusterError on failure when *check*."""
    res = subprocess.run(["ip", *args], input=stdin, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise SimClusterError(f"ip {' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout


def netns_unavailable_reason() -> str | None:
    """Why the namespace tier cannot run here, or None when it can.

    Probes for real: creates a throw-away namespace with a bridge and a veth pair inside
    it and runs ``unshare --uts`` there, then deletes the namespace (and with it all).
    """
    if os.geteuid() != 0:
        return "the netns tier needs root (network namespaces, /etc/netns)"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return f"{tool!r} not found on PATH"
    probe = f"clprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except SimClusterError as exc:
        return str(exc)
    try:
        _ip("-n", probe, "link", "add", "b0", "type", "bridge")
        _ip("-n", probe, "link", "add", "v0", "type", "veth", "peer", "name", "v1")
        res = subprocess.run(
            ["ip", "netns", "exec", probe, "unshare", "--uts", "true"], capture_output=True
        )
        if res.returncode != 0:
            return f"unshare --uts failed: {res.stderr.decode(errors='replace').strip()}"
    except SimClusterError as exc:
        return str(exc)
    finally:
        _ip("netns", "del", probe, check=False)
    return None


class NetnsCluster(LoopbackCluster):
    """Simulated hosts in network namespaces on a private bridge (root only).

    Same client-side API as :class:`LoopbackCluster`; ``hosts`` (their addresses) are
    known once ``start()`` has picked the subnet.  Each host's hostname is its name.
    Adds :meth:`partition` / :meth:`heal`.  ``stop()`` also kills processes left running
    on the hosts (found by marker: they would keep a deleted namespace alive) and
    returns them.
    """

    def __init__(
        self,
        n_hosts: int,
        base_dir: str | os.PathLike[str],
        port: int = 22,
        name_prefix: str = "node",
        *,
        ready_timeout: float = 15.0,
        ipv6: bool = False,
    ) -> None:
        if not 1 <= n_hosts <= 240:
            raise ValueError("NetnsCluster supports 1..240 hosts (10.250.X.10-249)")
        super().__init__(
            n_hosts, base_dir, port, name_prefix=name_prefix, ready_timeout=ready_timeout
        )
        suffix = self.cluster_id[:6]
        # Interface names are limited to 15 characters (IFNAMSIZ - 1).
        self.bridge = f"clb{suffix}"
        self._ns = [f"cl{suffix}n{i}" for i in range(n_hosts)]
        self._veth = [f"cl{suffix}v{i}" for i in range(n_hosts)]
        self.subnet: int | None = None
        self.ipv6 = ipv6
        self._network_up = False

    def _addr(self, index: int) -> str:
        if self.subnet is None:
            raise SimClusterError("NetnsCluster addresses are assigned by start()")
        return f"{self._prefix()}{10 + index:x}" if self.ipv6 else f"{self._prefix()}{10 + index}"

    def _prefix(self) -> str:
        """The subnet's addresses up to the host part (``10.250.X.``, ``fd42:X::``)."""
        return f"fd42:{self.subnet:x}::" if self.ipv6 else f"10.250.{self.subnet}."

    def _with_mask(self, addr: str) -> str:
        """``ip addr add`` words for ``addr`` (no duplicate address detection on IPv6:
        its seconds of tentative state would refuse sshd's bind)."""
        return f"{addr}/64 nodad" if self.ipv6 else f"{addr}/24"

    def namespace(self, name: str) -> str:
        """Network namespace of host *name* (usable with ``ip netns exec``)."""
        return self._ns[self.names.index(name)]

    def veth(self, name: str) -> str:
        """Root-namespace side of host *name*'s veth pair (its bridge port)."""
        return self._veth[self.names.index(name)]

    def partition(self, name: str) -> None:
        """Cut host *name* off the network (its bridge port goes down); see :meth:`heal`."""
        _ip("link", "set", self.veth(name), "down")

    def heal(self, name: str, timeout: float = 5.0) -> None:
        """Reconnect host *name* after :meth:`partition`; returns once packets flow again."""
        veth = self.veth(name)
        _ip("link", "set", veth, "up")
        brport = Path("/sys/class/net") / veth / "brport" / "state"
        deadline = time.monotonic() + timeout
        while brport.read_text().strip() != "3":  # BR_STATE_FORWARDING
            if time.monotonic() > deadline:
                raise SimClusterError(f"{name}: bridge port not forwarding {timeout}s after heal")
            time.sleep(0.01)
        # ARP entries left INCOMPLETE/FAILED by traffic sent during the partition would
        # hold back the first packets after the heal by up to a second (ARP retransmit
        # interval) and make tests flaky: every host starts with a fresh cache instead.
        _ip("neigh", "flush", "dev", self.bridge, check=False)
        for ns in self._ns:
            _ip("-n", ns, "neigh", "flush", "dev", "eth0", check=False)

    def _pick_subnet(self) -> int:
        family = "-6" if self.ipv6 else "-4"
        used = _ip("-br", family, "addr") + _ip(family, "route", "show", "table", "all")
        if self.ipv6:
            taken = {int(x, 16) for x in re.findall(r"\bfd42:([0-9a-f]{1,4})::", used)}
        else:
            taken = {int(x) for x in re.findall(r"\b10\.250\.(\d+)\.", used)}
        free = [x for x in range(1, 255) if x not in taken]
        if not free:
            raise SimClusterError("no free 10.250.X.0/24 (fd42:X::/64) subnet")
        return secrets.choice(free)

    def _setup_network(self) -> None:
        self.subnet = self._pick_subnet()
        ours = {self.bridge, *self._ns, *self._veth}
        existing = _ip("netns", "list") + _ip("-br", "link")
        if clash := ours & {w.split("@")[0] for w in existing.split()}:
            # Random names make this next to impossible, but never adopt (and later
            # delete) somebody else's namespace or link.
            raise SimClusterError(f"names already in use: {sorted(clash)}")
        self._network_up = True  # from here on, teardown removes whatever exists
        batch = [
            f"link add {self.bridge} type bridge",
            f"addr add {self._with_mask(self._prefix() + '1')} dev {self.bridge}",
            f"link set {self.bridge} up",
        ]
        for ns, veth in zip(self._ns, self._veth, strict=True):
            batch += [
                f"netns add {ns}",
                f"link add {veth} type veth peer name eth0 netns {ns}",
                f"link set {veth} master {self.bridge} up",
            ]
        _ip("-batch", "-", stdin="\n".join(batch) + "\n")
        prefix = self._prefix()
        in_use = _ip("-br", "-6" if self.ipv6 else "-4", "addr").splitlines()
        if sum(f" {prefix}" in line for line in in_use) != 1:
            raise SimClusterError(f"{prefix}0 was taken concurrently by another interface")
        hosts = self.hosts
        etc_hosts = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
        etc_hosts += "".join(f"{h.addr} {h.name}\n" for h in hosts)
        for ns, host in zip(self._ns, hosts, strict=True):
            inner = f"link set lo up\naddr add {self._with_mask(host.addr)} dev eth0\n"
            inner += "link set eth0 up\n"
            _ip("-n", ns, "-batch", "-", stdin=inner)
            (NETNS_ETC / ns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / ns / "hosts").write_text(etc_hosts)

    def _write_files(self) -> None:
        super()._write_files()
        if not self.ipv6:
            return
        # sshd on every address of its host, as a machine's sshd is by default: a test may
        # reach a host by another address of its own (a link-local one on a new link).
        for host in self.hosts:
            config = host.host_dir / "sshd_config"
            listen = f"ListenAddress [::]:{host.port}"
            config.write_text(re.sub(r"(?m)^ListenAddress .*$", listen, config.read_text()))

    def _launch_prefix(self, host: SimHost) -> list[str]:
        # ip netns exec bind-mounts /etc/netns/<ns>/hosts over /etc/hosts; unshare gives
        # the host its own hostname.  Each step exec()s, so the PID ends up being sshd's.
        ns = self.namespace(host.name)
        script = 'hostname "$0" && exec "$@"'
        return ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", script, host.name]

    def _teardown_network(self) -> list[orphans.ProcInfo]:
        if not self._network_up:
            return []
        # Processes started through sshd stay in the namespace (keeping it alive after
        # `ip netns del`) and would hold the veth: kill them first, by marker.
        killed: list[orphans.ProcInfo] = []
        for _ in range(10):  # repeat: a dying process tree may still be forking
            found = orphans.find_processes(self.markers())
            if not found:
                break
            killed += orphans.kill_processes(found)
            orphans.wait_until_gone(self.markers(), timeout=1.0)
        if killed:
            log.warning("killed %d leftover process(es) on %s", len(killed), self.bridge)
        batch = [f"netns del {ns}" for ns in self._ns]
        batch += [f"link del {veth}" for veth in self._veth] + [f"link del {self.bridge}"]
        # -force: go on past links already gone with their namespace.
        _ip("-force", "-batch", "-", stdin="\n".join(batch) + "\n", check=False)
        for ns in self._ns:
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        self._network_up = False
        return killed
