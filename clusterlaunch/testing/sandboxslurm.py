"""``sandbox up --slurm``: a real one-node Slurm on this machine, next to the sandbox's hosts.

The daemons of :mod:`clusterlaunch.testing.slurm` (the ones the ``slurm_real``
tests run, there one per namespace host), here one ``slurmd`` for this
machine under its own hostname, so that ``run slurm``'s master address (node
0's name) resolves. Detached: they outlive ``sandbox up``, and ``sandbox down``
stops them by recorded PID and start time, before it removes the directory.
"""

from __future__ import annotations

import shlex
import socket
from pathlib import Path

from clusterlaunch.core.errors import ClusterlaunchError, UsageError
from clusterlaunch.testing.slurm import STATE, SlurmDaemons, slurm_unavailable_reason, stop_recorded
from clusterlaunch.testing.sshd import find_free_port

SLURMCTLD_PORT = 6817
"""Slurm's own slurmctld port: the sandbox's search starts there."""

SUBDIR = "slurm"


def check() -> None:
    """UsageError (nothing started) when Slurm cannot run here."""
    reason = slurm_unavailable_reason()
    if reason is not None:
        raise UsageError(f"sandbox up --slurm: a real Slurm cannot run here: {reason}")


def start(directory: Path) -> SlurmDaemons:
    """munged, slurmctld and one slurmd for this machine, idle when this returns."""
    name = socket.gethostname()
    addr = _address(name)
    # Ports of its own: Slurm's 6817/6818 may be a real Slurm's on this machine, or
    # another sandbox's (which made the second one's slurmctld exit: address in use).
    ctld = find_free_port([addr], start=SLURMCTLD_PORT)
    ports = (ctld, find_free_port([addr], start=ctld + 1))
    daemons = SlurmDaemons(directory / SUBDIR, [(name, addr)], detached=True, ports=ports)
    try:
        return daemons.start()
    except RuntimeError as exc:  # a daemon exited, or the node never became idle
        raise ClusterlaunchError(f"sandbox up --slurm: Slurm did not start: {exc}") from None


def _address(name: str) -> str:
    try:
        return socket.gethostbyname(name)
    except OSError:
        return "127.0.0.1"


def stop(directory: Path) -> list[int]:
    """Stop the recorded daemons (none recorded: nothing to do); their PIDs."""
    return stop_recorded(directory / SUBDIR)


def is_up(directory: Path) -> bool:
    return (directory / SUBDIR / STATE).is_file()


def try_lines(directory: Path, shown: str, script_word: str) -> list[str]:
    """What ``up`` prints for it: the commands to try ``run slurm`` with."""
    conf = str((directory / SUBDIR / "slurm.conf").absolute())  # salloc may run elsewhere
    run = ["salloc", "-N1", "-n2", "clusterlaunch", "run", "slurm", script_word]
    return [
        f"Slurm (one node, {socket.gethostname()}; files in {shown}/{SUBDIR}):",
        "  " + shlex.join(["export", f"SLURM_CONF={conf}"]),
        "  " + shlex.join(run),
    ]
