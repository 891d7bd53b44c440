"""A real Slurm on this machine: munged, slurmctld and slurmd, for the tests and the sandbox.

Root only (slurmd runs steps as their users). Everything lives under one
directory: the munge key and socket, ``slurm.conf``, each daemon's log, spool
and PID files. :class:`SlurmDaemons` runs one ``slurmd`` per node; by default
every node is this machine itself (``sandbox up --slurm``: one node named as
the machine). The namespace tier (tests/slurm/real.py) subclasses it to run
each slurmd inside its host's network and UTS namespaces.

Clients (``salloc``, ``sbatch``, ``srun``) find the cluster with
:meth:`SlurmDaemons.env` (``SLURM_CONF``). Measured here (2 cores, Slurm
22.05.8, munge 0.5.15): three nodes idle 1.2-1.9 s after the start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from clusterlaunch.testing import orphans
from clusterlaunch.testing.sshd import write_private

MUNGED = "/usr/sbin/munged"
SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
CLIENTS = ("srun", "salloc", "sbatch", "scancel", "sinfo", "scontrol")
PACKAGES = "munge, slurmctld, slurmd, slurm-client"
STATE = "daemons.json"
"""Each daemon's PID and kernel start time, for ``sandbox down``."""

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
{ports}"""


def slurm_unavailable_reason(extra: Sequence[str] = ()) -> str | None:
    """Why a real Slurm cannot run here (not root, a missing program), or None."""
    missing = [p for p in (MUNGED, SLURMCTLD, SLURMD) if not os.access(p, os.X_OK)]
    missing += [p for p in (*CLIENTS, *extra) if shutil.which(p) is None]
    if missing:
        return (
            f"not installed: {', '.join(missing)} (Debian packages {PACKAGES}; "
            "scripts/test.sh installs them when run as root)"
        )
    if os.geteuid() != 0:
        return "slurmd must run as root"
    return None


class SlurmDaemons:
    """Slurm daemons for ``nodes`` (name, address), files under ``base_dir``.

    ``detached``: the daemons outlive this process (the sandbox); stop them
    with :func:`stop_recorded`.
    """

    def __init__(
        self,
        base_dir: Path,
        nodes: Sequence[tuple[str, str]],
        cpus: int | None = None,
        detached: bool = False,
        cluster_id: str = "sandbox",
        ports: tuple[int, int] | None = None,
    ) -> None:
        self.base = Path(base_dir).absolute()
        self.node_addrs = list(nodes)
        self.cpus = cpus or os.cpu_count() or 1
        self.detached = detached
        self.cluster_id = cluster_id
        self.ports = ports  # slurmctld's and slurmd's; None: Slurm's own 6817 and 6818
        self.conf = self.base / "slurm.conf"
        self.munge_socket = self.base / "munge.socket"
        self._daemons: dict[str, tuple[subprocess.Popen[bytes], int | None]] = {}
        self.start_seconds: float | None = None

    @property
    def nodes(self) -> list[str]:
        return [name for name, _ in self.node_addrs]

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user on the login node: ours, minus any allocation."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SRUN_"))}
        env.pop("NO_COLOR", None)
        return {**env, "SLURM_CONF": str(self.conf), "PYTHONUNBUFFERED": "1", **extra}

    # -- start ---------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> SlurmDaemons:
        """Start munged, slurmctld and every slurmd; return once all nodes are idle."""
        started = time.monotonic()
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
        self.start_seconds = round(time.monotonic() - started, 2)
        return self

    def _start_munged(self) -> None:
        key = self.base / "munge.key"
        self.base.mkdir(parents=True, exist_ok=True)
        write_private(key, os.urandom(1024))  # 0600 from the start, whatever the umask
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
        nodes = "".join(
            f"NodeName={name} NodeAddr={addr} CPUs={self.cpus} State=UNKNOWN\n"
            for name, addr in self.node_addrs
        )
        (self.base / "ctld").mkdir(exist_ok=True)
        for name in self.nodes:
            (self.base / name / "spool").mkdir(parents=True, exist_ok=True)
        ctl_name, ctl_addr = self.node_addrs[0]
        fields = dict(cluster=self.cluster_id[:8], ctl_name=ctl_name, ctl_addr=ctl_addr,
                      munge_socket=self.munge_socket, base=self.base, nodes=nodes.rstrip(),
                      ports="" if self.ports is None else
                      "SlurmctldPort={}\nSlurmdPort={}\n".format(*self.ports))  # fmt: skip
        self.conf.write_text(_CONF.format(**fields))

    def start_slurmd(self, node: str) -> None:
        """(Re)start ``node``'s slurmd; it registers with slurmctld on its own."""
        self._spawn(f"slurmd-{node}", node, [SLURMD, "-D", "-N", node, "-f", str(self.conf)])

    def _spawn(self, name: str, node: str | None, argv: list[str]) -> None:
        if node is not None:
            argv = [*self.enter(node), *argv]
        out = open(self.base / f"{name}.out", "ab")  # noqa: SIM115 - the daemon keeps it
        with out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                    env=self.env(), start_new_session=self.detached)  # fmt: skip
        # nsenter, unshare and sh all exec: the PID ends up being the daemon's.
        self._daemons[name] = (proc, orphans.start_time(proc.pid))
        state = {n: [p.pid, t] for n, (p, t) in self._daemons.items()}
        (self.base / STATE).write_text(json.dumps(state))

    def enter(self, node: str) -> list[str]:
        """argv prefix that runs a daemon on ``node``: nothing, on this machine."""
        return []

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
        """SIGKILL ``node``'s slurmd only: its running steps (slurmstepd) live on."""
        proc, started = self._daemons.pop(f"slurmd-{node}")
        orphans.signal_pid(proc.pid, signal.SIGKILL, started)
        proc.wait()

    def stop(self) -> list[str]:
        """Stop every daemon (slurmds first, munged last)."""
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
        return []

    def _exited(self, name: str) -> bool:
        return self._daemons[name][0].poll() is not None

    def _output(self, name: str) -> str:
        path = self.base / f"{name}.out"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def stop_recorded(base_dir: Path, timeout: float = 10.0) -> list[int]:
    """Stop the daemons a detached :class:`SlurmDaemons` recorded in ``base_dir``; their PIDs."""
    state_file = Path(base_dir) / STATE
    if not state_file.is_file():
        return []
    state = json.loads(state_file.read_text())
    ordered = sorted(state.items(), key=lambda item: _stop_order(item[0]))
    for _name, (pid, started) in ordered:
        orphans.signal_pid(pid, signal.SIGTERM, started)
    deadline = time.monotonic() + timeout
    for _name, (pid, started) in ordered:
        while orphans.is_alive(pid) and orphans.start_time(pid) == started:
            if time.monotonic() > deadline:
                orphans.signal_pid(pid, signal.SIGKILL, started)
                break
            time.sleep(0.05)
    return [pid for pid, _ in state.values()]


def _stop_order(name: str) -> int:
    return {"munged": 2, "slurmctld": 1}.get(name, 0)
