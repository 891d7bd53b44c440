"""Host loss by network partition, on hosts in network namespaces (root only)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from clusterlaunch.testing import wait_until_gone
from tests.cluster.support import start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.netns, pytest.mark.torch]


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_silent_partition_is_detected_and_everything_ends(
    netns_cluster_factory, tmp_path: Path, record_property, client: str
) -> None:
    cluster = netns_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    options = ("--ssh-client", client, "--grace", "2", "--heartbeat-timeout", "5")
    process = start_cli("run", cluster, *options, str(hosts), "sleeper.py")
    try:
        wait_for_lines(process, b" up", 3, timeout=120)
        cut_at = time.monotonic()
        cluster.partition("node2")  # link down: no FIN, no RST, just silence
        assert process.wait(timeout=40) == 255
        detected_after = time.monotonic() - cut_at
        assert process.stderr is not None
        err = process.stderr.read().decode()
        lost = "node2: host lost (no answer to keepalives)" in err
        if client == "openssh":  # ssh's ServerAlive may end the master (and session) first
            lost = lost or bool(re.search(r"node2 lost: Timeout, server \S+ not responding", err))
        assert lost, err[-1500:]
        assert "host node2 was lost" in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    record_property("partition_to_job_end_s", round(detected_after, 2))
    reachable = [h.marker for h in cluster.hosts if h.name != "node2"]
    assert wait_until_gone(reachable, timeout=5.0) == []
    # Still cut off, node2's agent hears no heartbeat and ends the job itself:
    # heartbeat timeout 5 s + grace 2 s, plus margin.
    assert wait_until_gone([cluster.host("node2").marker], timeout=15.0) == []
