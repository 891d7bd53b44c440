"""Ending the setups the controller gives up on (see :mod:`clusterlaunch.core.setupguard`)."""

from __future__ import annotations

from collections.abc import Sequence

from clusterlaunch.controller.batch import Batch
from clusterlaunch.core.setupguard import SetupWatch, kill_command
from clusterlaunch.transport.base import Connection


def kill_setups(stuck: Sequence[tuple[Connection, SetupWatch]], wait: float = 5.0) -> list[str]:
    """Kill the process group of every setup still running; the hosts it was done on.

    Each kill runs on a fresh channel and goes on by itself once started, so
    an interrupt while waiting here does not stop it.
    """
    jobs = {
        watch.host: (connection, kill_command(watch.pid, watch.token))
        for connection, watch in stuck
        if watch.running and watch.pid is not None
    }
    if not jobs:
        return []
    results = Batch(jobs).wait(wait)
    return [host for host, finished in results.items() if finished.status == 0]
