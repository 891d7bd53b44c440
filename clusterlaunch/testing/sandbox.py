"""``clusterlaunch sandbox up|down``: a simulated cluster on this machine to try things on.

``up`` starts the loopback cluster the test suite uses (one real OpenSSH sshd
per "host", on 127.0.0.11, .12, ...; see :mod:`clusterlaunch.testing`),
detached so it outlives the command, writes a ready hosts file next to the
generated SSH config and prints the exact commands to try. ``down`` stops every
sshd by its recorded PID, kills (by PID) anything still running that was
started through the sandbox hosts, and removes the directory.

Nothing here matches processes by name: sshd processes are known by the PID and
kernel start time recorded at ``up``; leftovers by the ``CLUSTERLAUNCH_SIM_HOST``
marker every sandbox session carries in its environment.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterlaunch.core.defaults import SANDBOX_HOSTS as DEFAULT_HOSTS
from clusterlaunch.core.defaults import SANDBOX_MAX_HOSTS as MAX_HOSTS
from clusterlaunch.core.errors import ClusterlaunchError, UsageError
from clusterlaunch.testing import (
    DEFAULT_PORT,
    LoopbackCluster,
    PortInUseError,
    ProcInfo,
    SimClusterError,
    find_free_port,
    kill_processes,
    loopback_addrs,
    sandboxslurm,
    start_detached,
    stop_detached,
    wait_until_gone,
)
from clusterlaunch.testing.orphans import is_alive, start_time
from clusterlaunch.testing.sshd import SSHD, STATE_FILE, write_private

FIRST_OCTET = 11
HOSTS_FILE = "hosts.yaml"
SSHD_ENV = "CLUSTERLAUNCH_SANDBOX_SSHD"
"""Test hook: the sshd path ``up`` requires (the cluster itself always runs ``/usr/sbin/sshd``)."""
SSHD_HINT = "sudo apt-get install openssh-server"
LEFTOVER_WAIT_S = 5.0


class SandboxError(ClusterlaunchError):
    """The sandbox could not be started or stopped (exit status 1)."""


@dataclass(frozen=True)
class Sandbox:
    """A running sandbox, as recorded in its directory."""

    directory: Path
    hosts: list[dict[str, Any]]
    already_up: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ssh_config(self) -> Path:
        """The generated OpenSSH client config (one ``Host`` block per host)."""
        return self.directory / "ssh_config"

    @property
    def hosts_file(self) -> Path:
        """The clusterlaunch hosts file written by ``up``."""
        return self.directory / HOSTS_FILE


@dataclass(frozen=True)
class Stopped:
    """What ``down`` did."""

    sshd_pids: list[int]
    leftovers: list[ProcInfo]
    slurm_pids: list[int] = field(default_factory=list)


# -- up -------------------------------------------------------------------------------------
def up(
    directory: Path,
    n_hosts: int = DEFAULT_HOSTS,
    gpus: int = 1,
    port: int | None = None,
    sshd: str = SSHD,
    slurm: bool = False,
) -> Sandbox:
    """Start a sandbox in ``directory`` (``slurm``: with a real Slurm), or report the one
    already running there."""
    if slurm:
        sandboxslurm.check()
    if not os.access(sshd, os.X_OK):
        raise UsageError(f"sandbox needs OpenSSH's sshd at {sshd}; install it: {SSHD_HINT}")
    if not 1 <= n_hosts <= MAX_HOSTS:
        raise UsageError(f"--hosts {n_hosts}: use 1 to {MAX_HOSTS}")
    if gpus < 1:
        raise UsageError(f"--gpus {gpus}: must be at least 1")
    if port is not None and not 1 <= port <= 65535:
        raise UsageError(f"--port {port}: use a TCP port 1-65535")
    _refuse_a_place_others_may_change(directory)
    notes: list[str] = []
    if (directory / STATE_FILE).is_file():
        running = _running(directory)
        if running is not None:
            if len(running) != n_hosts:
                raise UsageError(
                    f"a sandbox with {len(running)} host(s) is already up in {directory}; "
                    "run clusterlaunch sandbox down first to change it"
                )
            return Sandbox(directory, running, already_up=True)
        # Recorded, but its sshd processes are gone (a reboot, a kill): clear it out.
        left = stop_detached(directory)
        notes.append(f"removed a stale sandbox from {directory} (its sshd was not running)")
        notes += [f"killed leftover process {proc}" for proc in left]
    elif directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(
            f"{directory} exists and is not a sandbox (no {STATE_FILE}); "
            "choose another --dir or remove it"
        )
    created = not directory.exists()
    try:
        cluster = _start(directory, n_hosts, port)
        _write_hosts_file(directory / HOSTS_FILE, cluster.names, gpus)
        if slurm:
            sandboxslurm.start(directory)
    except BaseException:
        # A failed or interrupted start must not leave a half-made directory that
        # the next ``up`` would refuse as "not a sandbox".
        sandboxslurm.stop(directory)
        if (directory / STATE_FILE).is_file():
            stop_detached(directory)  # sshd running: stop it (this removes the directory)
        shutil.rmtree(directory, ignore_errors=True)
        if not created:
            directory.mkdir(exist_ok=True)  # it was there, empty, before: leave it so
        raise
    if importlib.util.find_spec("torch") is None:
        notes.append(
            f"torch is not installed for {sys.executable}, which the hosts run; "
            "install it (pip install torch) or change python: in the hosts file"
        )
    return Sandbox(directory, _state(directory)["hosts"], notes=notes)


def _start(directory: Path, n_hosts: int, port: int | None) -> LoopbackCluster:
    addrs = loopback_addrs(n_hosts, FIRST_OCTET)
    candidate = DEFAULT_PORT
    for _ in range(5):
        # Raises PortInUseError (reported by cli/sandbox.py) when no port is free at all.
        chosen = port if port is not None else find_free_port(addrs, candidate)
        try:
            return start_detached(n_hosts, directory, port=chosen, first_host_octet=FIRST_OCTET)
        except SimClusterError as exc:
            if port is not None or not isinstance(exc, PortInUseError):
                raise SandboxError(f"sandbox did not start: {exc}") from None
            candidate = chosen + 1  # taken by someone else since find_free_port: next one
    raise SandboxError(f"sandbox did not start: no free port from {DEFAULT_PORT} on {addrs}")


def _refuse_a_place_others_may_change(directory: Path) -> None:
    """UsageError where another user could swap ``directory`` (or a folder above it) for one
    of theirs: each host's sshd reads the login keys there at every login (``StrictModes
    no``), so they could log in as this user. As sshd's own check, but a sticky folder such
    as /tmp is safe: nobody can rename or remove what others own in it. Both the path
    sshd is given and the one it leads to (a symbolic link on the way)."""
    resolved = directory.resolve()
    for place in dict.fromkeys([directory, *directory.parents, resolved, *resolved.parents]):
        try:
            found = place.stat()
        except FileNotFoundError:  # made by sandbox up, not writable by others
            continue
        if found.st_uid not in (0, os.getuid()):
            why = f"{place} belongs to another user (uid {found.st_uid})"
        elif found.st_mode & 0o022 and not found.st_mode & stat.S_ISVTX:
            why = f"others may write in {place} (mode {stat.S_IMODE(found.st_mode):04o})"
        else:
            continue
        raise UsageError(
            f"--dir {directory}: {why}, so they could replace the sandbox's login keys and "
            f"log in as you; chmod go-w {place}, or choose another --dir"
        )


def _write_hosts_file(path: Path, names: list[str], gpus: int) -> None:
    lines = [
        f"# clusterlaunch sandbox: {len(names)} simulated hosts on this machine, one sshd",
        "# each, reached through the ssh_config next to this file. Edit freely:",
        "# docs/hosts-file.md describes every key.",
        "defaults:",
        "  # The interpreter that ran `clusterlaunch sandbox up` (the hosts need torch).",
        f"  python: {json.dumps(sys.executable)}",
        "  # Every host is this machine and would share its GPUs: hide them so each",
        "  # rank uses gloo on the CPU (NCCL refuses two ranks on one GPU).",
        "  setup: export CUDA_VISIBLE_DEVICES=",
        "hosts:",
    ]
    for name in names:
        lines += [f"  - host: {name}", f"    gpus: {gpus}"]
    write_private(path, ("\n".join(lines) + "\n").encode())


def _state(directory: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((directory / STATE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise SandboxError(f"cannot read {directory / STATE_FILE}: {exc}") from None
    return state


def _running(directory: Path) -> list[dict[str, Any]] | None:
    """The recorded hosts if every recorded sshd still runs (same PID and start time)."""
    hosts: list[dict[str, Any]] = _state(directory)["hosts"]
    alive = all(
        h.get("pid") and start_time(h["pid"]) == h.get("starttime") and is_alive(h["pid"])
        for h in hosts
    )  # is_alive too: a killed sshd nobody reaped is a zombie with the same start time
    return hosts if alive else None


# -- down -----------------------------------------------------------------------------------
def down(directory: Path) -> Stopped | None:
    """Stop the sandbox in ``directory`` and remove it; ``None`` if there is none."""
    if not directory.exists():
        return None
    if not (directory / STATE_FILE).is_file():
        raise UsageError(f"{directory} is not a sandbox (no {STATE_FILE}); not removing it")
    hosts = _state(directory)["hosts"]
    markers = [h["marker"] for h in hosts]
    try:
        # Slurm's daemons and sshd by recorded PID (and start time), then leftovers by
        # marker, then rmtree.
        slurm_pids = sandboxslurm.stop(directory)
        leftovers = stop_detached(directory)
    except SimClusterError as exc:
        raise SandboxError(f"sandbox down: {exc}") from None
    # A process that forked while the others were being killed escapes one sweep.
    for _ in range(3):
        still = wait_until_gone(markers, timeout=LEFTOVER_WAIT_S)
        if not still:
            break
        leftovers += kill_processes(still)
    else:
        raise SandboxError(f"processes survived SIGKILL: {[p.pid for p in still]}")
    if directory.exists():
        raise SandboxError(f"sandbox down: could not remove {directory}")
    return Stopped([h["pid"] for h in hosts if h.get("pid")], leftovers, slurm_pids)
