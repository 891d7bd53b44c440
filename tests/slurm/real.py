"""A real Slurm on the namespace tier: munged, slurmctld and one slurmd per simulated host.

Root only.  On top of a started :class:`~tests.netns.NetnsCluster` (each host a network
namespace with its own hostname): one ``munged`` with its own key and socket in the root
namespace (the socket is a file, reachable from every namespace); ``slurmctld`` on
``node0`` (so it listens inside the namespace, never on the machine's own interfaces);
and a ``slurmd`` in every host's network and UTS namespace, which takes its node name
from the hostname.  Clients (``salloc``, ``sbatch``, ``srun``, ``scancel``) run anywhere
with :meth:`SlurmCluster.env`: the root namespace plays the login node, reaching the
nodes over the bridge.

Every daemon gets a fresh mount namespace with the host's ``/etc/hosts`` bound over
``/etc/hosts`` (as ``ip netns exec`` does) but keeps the machine's ``/sys``:
``ip netns exec`` remounts ``/sys`` without ``/sys/fs/cgroup``, and slurmd 22.05 then
refuses to start ("Unable to initialize cgroup plugin") even with proctrack/linuxproc.
Measured here (2 cores, Slurm 22.05.8): all three nodes idle ~0.1 s after slurmctld starts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from clusterlaunch.testing import orphans
from tests.netns import NetnsCluster

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
CLIENTS = ("srun", "salloc", "sbatch", "scancel", "sinfo", "scontrol", "nsenter", "unshare")
PACKAGES = "munge, slurmctld, slurmd, slurm-client"

# Why each setting: no cgroups without systemd here, so Slurm tracks a step's processes
# by parentage (linuxproc) and binds nothing; config_overrides lets slurmd accept the
# CPU count below whatever the hardware says; a short KillWait (SIGTERM -> SIGKILL on
# scancel) and SlurmdTimeout (a silent slurmd's node is DOWN) keep the tests short.
_CONF = """\
ClusterName=cl{cluster}
SlurmctldHost={ctl_name}({ctl_addr})
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={base}/ctld
SlurmctldPidFile={base}/ctld/slurmctld.pid
SlurmctldLogFile={base}/ctld/slurmctld.log
SlurmdSpoolDir={base}/%n/spool
SlurmdPidFile={base}/%n/slurmd.pid
SlurmdLogFile={base}/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdTimeout=10
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def slurm_unavailable_reason() -> str | None:
    """Why a real Slurm cannot run here (a missing program), or None."""
    missing = [p for p in (MUNGED, SLURMCTLD, SLURMD) if not os.access(p, os.X_OK)]
    missing += [p for p in CLIENTS if shutil.which(p) is None]
    if missing:
        return (
            f"not installed: {', '.join(missing)} (Debian packages {PACKAGES}, util-linux; "
            "scripts/test.sh installs them when run as root)"
        )
    return None


class SlurmCluster:
    """Slurm daemons for the hosts of *net* (started), files under *base_dir*."""

    def __init__(self, net: NetnsCluster, base_dir: Path, cpus: int | None = None) -> None:
        self.net = net
        self.base = Path(base_dir).absolute()
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = self.base / "slurm.conf"
        self.munge_socket = self.base / "munge.socket"
        self._daemons: dict[str, tuple[subprocess.Popen[bytes], int | None]] = {}
        self.start_seconds: float | None = None  # namespaces and daemons, as measured

    @property
    def nodes(self) -> list[str]:
        return self.net.names

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user on the login node: ours, minus any allocation."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_"))}
        env.pop("NO_COLOR", None)
        return {**env, "SLURM_CONF": str(self.conf), "PYTHONUNBUFFERED": "1", **extra}

    # -- start ---------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> SlurmCluster:
        """Start munged, slurmctld and every slurmd; return once all nodes are idle."""
        try:
            self._start_munged()
            self._write_conf()
            self._spawn("slurmctld", self.nodes[0], [SLURMCTLD, "-D", "-f", str(self.conf)])
            for node in self.nodes:
                self.start_slurmd(node)
            self.wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_munged(self) -> None:
        key = self.base / "munge.key"
        self.base.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        files = {f"--{n}-file": self.base / f"munged.{n}" for n in ("log", "pid", "seed")}
        argv = [MUNGED, "--foreground", "--force", f"--socket={self.munge_socket}",
                f"--key-file={key}", *(f"{opt}={path}" for opt, path in files.items())]  # fmt: skip
        self._spawn("munged", None, argv)
        deadline = time.monotonic() + 10
        while not self.munge_socket.exists():
            if time.monotonic() > deadline or self._exited("munged"):
                raise RuntimeError(f"munged did not start: {self._output('munged')}")
            time.sleep(0.01)

    def _write_conf(self) -> None:
        hosts = self.net.hosts
        nodes = "".join(
            f"NodeName={h.name} NodeAddr={h.addr} CPUs={self.cpus} State=UNKNOWN\n" for h in hosts
        )
        (self.base / "ctld").mkdir(exist_ok=True)
        for host in hosts:
            (self.base / host.name / "spool").mkdir(parents=True, exist_ok=True)
        fields = dict(cluster=self.net.cluster_id[:8], ctl_name=hosts[0].name,
                      ctl_addr=hosts[0].addr, munge_socket=self.munge_socket, base=self.base,
                      nodes=nodes.rstrip())  # fmt: skip
        self.conf.write_text(_CONF.format(**fields))

    def start_slurmd(self, node: str) -> None:
        """(Re)start *node*'s slurmd; it registers with slurmctld on its own."""
        self._spawn(f"slurmd-{node}", node, [SLURMD, "-D", "-f", str(self.conf)])

    def _spawn(self, name: str, node: str | None, argv: list[str]) -> None:
        if node is not None:
            argv = [*self._enter(node), *argv]
        out = open(self.base / f"{name}.out", "ab")  # noqa: SIM115 - the daemon keeps it
        with out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=self.env())  # fmt: skip
        # nsenter, unshare and sh all exec: the PID ends up being the daemon's.
        self._daemons[name] = (proc, orphans.start_time(proc.pid))

    def _enter(self, node: str) -> list[str]:
        """argv prefix: *node*'s network and UTS namespaces, its /etc/hosts, the host's /sys."""
        sshd = self.net.host(node).pid
        hosts_file = f"/etc/netns/{self.net.namespace(node)}/hosts"
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        return ["nsenter", "-t", str(sshd), "-n", "-u", "--", "unshare", "-m",
                "sh", "-c", script, hosts_file]  # fmt: skip

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait until every node is idle (registered, and no job on it)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n) == "idle" for n in self.nodes):
                return
            if dead := [n for n in self._daemons if self._exited(n)]:
                raise RuntimeError(f"{dead} exited: {self._output(dead[0])}")
            time.sleep(0.05)
        log = self._output("slurmctld")
        raise RuntimeError(f"nodes not idle after {timeout}s: {states}\n{log}")

    def node_states(self) -> dict[str, str]:
        """``{node: state}`` as sinfo reports it (``idle``, ``alloc``, ``down*`` ...)."""
        res = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(),
                             capture_output=True, text=True, timeout=30)  # fmt: skip
        return dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)

    def job_exit_code(self, job_id: str, timeout: float = 30.0) -> tuple[str, str]:
        """``(JobState, ExitCode)`` of a finished job, e.g. ``("CANCELLED", "143:0")``."""
        deadline = time.monotonic() + timeout
        while True:
            text = subprocess.run(["scontrol", "-o", "show", "job", job_id], env=self.env(),
                                  capture_output=True, text=True).stdout  # fmt: skip
            state = re.search(r"\bJobState=(\S+)", text)
            code = re.search(r"\bExitCode=(\S+)", text)
            if state and code and state[1] not in ("PENDING", "RUNNING", "COMPLETING"):
                return state[1], code[1]
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still not finished: {text}")
            time.sleep(0.1)

    # -- processes -------------------------------------------------------------------
    def daemon_pid(self, name: str) -> int:
        return self._daemons[name][0].pid

    def kill_slurmd(self, node: str) -> None:
        """SIGKILL *node*'s slurmd only: its running steps (slurmstepd) live on."""
        proc, started = self._daemons.pop(f"slurmd-{node}")
        orphans.signal_pid(proc.pid, signal.SIGKILL, started)
        proc.wait()

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

    # -- stop ------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop every daemon (slurmds first, munged last); return the strays it killed."""
        for name in sorted(self._daemons, key=_stop_order):
            proc, started = self._daemons[name]
            orphans.signal_pid(proc.pid, signal.SIGTERM, started)
        for name in sorted(self._daemons, key=_stop_order):
            proc, started = self._daemons.pop(name)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                orphans.signal_pid(proc.pid, signal.SIGKILL, started)
                proc.wait()
        return self.strays(timeout=0) if self.net.subnet is not None else []

    def _exited(self, name: str) -> bool:
        return self._daemons[name][0].poll() is not None

    def _output(self, name: str) -> str:
        path = self.base / f"{name}.out"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def _stop_order(name: str) -> int:
    return {"munged": 2, "slurmctld": 1}.get(name, 0)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
