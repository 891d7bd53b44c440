"""A real Slurm on the namespace tier: munged, slurmctld and one slurmd per simulated host.

Root only.  On top of a started :class:`~tests.netns.NetnsCluster` (each host a network
namespace with its own hostname): one ``munged`` with its own key and socket in the root
namespace (the socket is a file, reachable from every namespace); ``slurmctld`` on
``node0`` (so it listens inside the namespace, never on the machine's own interfaces);
and a ``slurmd`` in every host's network and UTS namespace.  Clients (``salloc``,
``sbatch``, ``srun``, ``scancel``) run anywhere with :meth:`SlurmCluster.env`: the root
namespace plays the login node, reaching the nodes over the bridge.  The daemons
themselves are :class:`clusterlaunch.testing.slurm.SlurmDaemons` (``sandbox up --slurm``
runs the same on this machine alone).

Every daemon gets a fresh mount namespace with the host's ``/etc/hosts`` bound over
``/etc/hosts`` (as ``ip netns exec`` does) but keeps the machine's ``/sys``:
``ip netns exec`` remounts ``/sys`` without ``/sys/fs/cgroup``, and slurmd 22.05 then
refuses to start ("Unable to initialize cgroup plugin") even with proctrack/linuxproc.
Measured here (2 cores, Slurm 22.05.8): all three nodes idle ~0.1 s after slurmctld starts.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from clusterlaunch.testing import orphans
from clusterlaunch.testing.slurm import SlurmDaemons
from clusterlaunch.testing.slurm import slurm_unavailable_reason as _unavailable
from tests.netns import NetnsCluster

MARKS = ("slurm_real", "cluster", "netns")
"""Every real Slurm test's marks (tests/slurm/test_real_slurm.py); tests/conftest.py
schedules by them."""


def slurm_unavailable_reason() -> str | None:
    """Why a real Slurm cannot run here (a missing program), or None."""
    return _unavailable(extra=("nsenter", "unshare"))


class SlurmCluster(SlurmDaemons):
    """Slurm daemons for the hosts of *net* (started), files under *base_dir*."""

    def __init__(self, net: NetnsCluster, base_dir: Path, cpus: int | None = None) -> None:
        nodes = [(host.name, host.addr) for host in net.hosts]
        super().__init__(base_dir, nodes, cpus, cluster_id=net.cluster_id)
        self.net = net

    def enter(self, node: str) -> list[str]:
        """argv prefix: *node*'s network and UTS namespaces, its /etc/hosts, the host's /sys."""
        sshd = self.net.host(node).pid
        hosts_file = f"/etc/netns/{self.net.namespace(node)}/hosts"
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return ["nsenter", "-t", str(sshd), "-n", "-u", "--", "unshare", "-m",
                "sh", "-c", script, hosts_file]  # fmt: skip

    def strays(self, timeout: float) -> list[str]:
        """Processes on the nodes other than their daemons, once *timeout* has passed.

        Found by network namespace, so slurmstepd and whatever a job left behind count,
        marked or not.  Whatever is left is SIGKILLed; the list says what it was.
        """
        deadline = time.monotonic() + timeout
        while True:
            found = self._foreign_processes()
            if not found or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        for pid, _node, _cmd in found:
            orphans.signal_pid(pid, signal.SIGKILL)
        return [f"{node}: pid {pid} {cmd!r}" for pid, node, cmd in found]

    def _foreign_processes(self) -> list[tuple[int, str, str]]:
        spaces = {os.stat(f"/run/netns/{self.net.namespace(n)}").st_ino: n for n in self.nodes}
        ours = {proc.pid for proc, _ in self._daemons.values()}
        if "slurmctld" in self._daemons:  # and its helper, slurmscriptd
            ours |= set(orphans.descendants([self.daemon_pid("slurmctld")]))
        ours |= {h.pid for h in self.net.hosts if h.pid is not None}
        found = []
        for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
            try:
                node = spaces.get(os.stat(f"/proc/{pid}/ns/net").st_ino)
            except OSError:
                continue
            if node is not None and pid not in ours and orphans.is_alive(pid):
                found.append((pid, node, _cmdline(pid)))
        return found

    def stop(self) -> list[str]:
        """Stop every daemon (slurmds first, munged last); return the strays it killed."""
        super().stop()
        return self.strays(timeout=0) if self.net.subnet is not None else []


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
