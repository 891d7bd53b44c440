"""Simulated clusters that outlive the process that started them (``clusterlaunch sandbox``)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from clusterlaunch.testing import orphans
from clusterlaunch.testing.loopback import LoopbackCluster
from clusterlaunch.testing.sshd import STATE_FILE, SimClusterError


def start_detached(
    n_hosts: int, base_dir: str | os.PathLike[str], **kwargs: Any
) -> LoopbackCluster:
    """Start a loopback cluster whose sshd processes outlive this process.

    PIDs, start times and markers are recorded in ``base_dir/simcluster.json`` for
    :func:`stop_detached`.
    """
    return LoopbackCluster(n_hosts, base_dir, detached=True, **kwargs).start()


def stop_detached(base_dir: str | os.PathLike[str]) -> list[orphans.ProcInfo]:
    """Stop a cluster started by :func:`start_detached` and remove *base_dir*.

    sshd processes are stopped by their recorded PID (checked against the recorded start
    time); processes still running in the hosts' sessions are killed and returned.
    """
    root = Path(base_dir)
    try:
        state = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise SimClusterError(f"no simulated cluster state in {root}: {exc}") from exc
    LoopbackCluster._stop_sshd({h["pid"]: h["starttime"] for h in state["hosts"] if h["pid"]})
    left = orphans.kill_processes(orphans.find_processes(h["marker"] for h in state["hosts"]))
    shutil.rmtree(root, ignore_errors=True)
    return left
