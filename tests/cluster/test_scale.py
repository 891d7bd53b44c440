"""Hundreds of hosts: ``exec`` on 256 simulated hosts completes, every host once, 0 orphans.

256 real sshd on 127.0.0.11-254 and 127.0.1.1-23 (see clusterlaunch.testing.loopback).
On the 2-core development machine this took ~20 s to start the cluster and
~15-30 s for the exec under load; CI runs it with the rest of the cluster tier.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = pytest.mark.cluster

HOSTS = 256


@pytest.mark.timeout(420)
def test_exec_on_256_hosts_completes_with_every_host_once_and_no_orphans(
    sim_cluster_factory: Callable[..., LoopbackCluster],
    assert_no_orphans: Callable[..., None],
    tmp_path: Path,
) -> None:
    cluster = sim_cluster_factory(HOSTS)
    assert cluster.hosts[-1].addr == "127.0.1.12"  # past 127.0.0.254
    hosts = write_hosts(tmp_path / "hosts.yaml", [(name, 1) for name in cluster.names])
    result = run_cli(
        "exec", cluster, str(hosts), "--", "sh", "-c",
        "echo $CLUSTERLAUNCH_SIM_HOST", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    seen = []
    for line in result.stdout.splitlines():
        match = re.fullmatch(r"\[(node\d+)\] +[0-9a-f]{12}-(node\d+)", line)
        assert match is not None and match[1] == match[2], line
        seen.append(match[1])
    assert sorted(seen) == sorted(cluster.names)
    assert_no_orphans(cluster, timeout=30.0)
