"""Small job plans the unit tests share: planned by the real planner, never built by hand."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from clusterlaunch.core.model import HostSpec, Inventory, JobPlan, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job


def two_ranks_per_host(
    hosts: Sequence[str] = ("a", "b"),
    exec_argv: tuple[str, ...] | None = None,
    setups: Mapping[str, str] | None = None,
) -> JobPlan:
    """Two ranks per host on 10.0.0.x: a has ranks 0-1, b 2-3, c 4-5; ``setups`` by host."""
    specs = tuple(HostSpec(h, 2, setup=(setups or {}).get(h)) for h in hosts)
    inventory = Inventory("hosts.yaml", specs, master_port=29500)
    targets = [SshTarget(h, f"10.0.0.{i + 1}") for i, h in enumerate(hosts)]
    return plan_job(
        inventory,
        targets,
        LaunchOptions(script="train.py"),
        job_id="j1",
        local_env={},
        local_cwd="/w",
        agent_size=1,
        exec_argv=exec_argv,
    )


def two_local_hosts(job_id: str, workdir: str, setup_b: str | None = None) -> JobPlan:
    """Hosts a and b, one rank each, both this machine (127.0.0.1) with this Python."""
    hosts = (HostSpec("a", 1, python=sys.executable), HostSpec("b", 1, setup=setup_b))
    return plan_job(
        Inventory("hosts.yaml", hosts, master_port=None, master_addr="127.0.0.1"),
        [SshTarget("a", "127.0.0.1"), SshTarget("b", "127.0.0.1")],
        LaunchOptions(script="", python=sys.executable),
        job_id=job_id,
        local_env={},
        local_cwd=workdir,
        agent_size=1,
    )
