"""Host loss by network partition, on hosts in network namespaces (root only)."""

from __future__ import annotations

import re
import signal
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


def _exec_sleeping(cluster, tmp_path: Path, *options: str):
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    command = ("--", "sh", "-c", "echo up; sleep 600")
    process = start_cli("exec", cluster, "--job-id", "cut", *options, str(hosts), *command)
    wait_for_lines(process, b"up", 2, timeout=60)
    return process


def test_ctrl_c_says_a_lost_hosts_job_may_run_on(netns_cluster_factory, tmp_path: Path) -> None:
    """Ctrl-C while a host was cut off ended with 'host lost' and 'interrupted': nothing said
    that its job ran on there (it did, until --heartbeat-timeout) nor how to end it."""
    cluster = netns_cluster_factory(2)
    process = _exec_sleeping(cluster, tmp_path, "--heartbeat-timeout", "60")
    try:
        cluster.partition("node1")
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=40)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = err.decode()
    assert process.returncode == 130, text[-1500:]
    assert "node1: host lost (no answer to keepalives)" in text, text[-1500:]
    assert (
        "clusterlaunch: node1: its part of the job may still be running there: its agent ends "
        "it after --heartbeat-timeout (60 s) without word from this controller; clusterlaunch "
        "ps HOSTS lists it, clusterlaunch kill HOSTS cut ends it once the host answers\n"
    ) in text
    assert "node0: its part" not in text
    assert wait_until_gone([cluster.host("node1").marker], timeout=1.0) != []  # it does run on
    cluster.heal("node1")  # our connection's end reaches its sshd: the agent ends the job
    assert wait_until_gone([cluster.host("node1").marker], timeout=20.0) == []


def test_a_short_cut_under_a_small_heartbeat_timeout_names_the_network(
    netns_cluster_factory, tmp_path: Path
) -> None:
    """It was blamed on a suspended controller ('was clusterlaunch suspended?'), and the job
    failed as 'the hosts lost touch with the controller': one host had, over the network."""
    cluster = netns_cluster_factory(2)
    process = _exec_sleeping(cluster, tmp_path, "--heartbeat-timeout", "2")
    try:
        cluster.partition("node1")
        time.sleep(3)
        cluster.heal("node1")
        _, err = process.communicate(timeout=40)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = err.decode()
    assert process.returncode == 255, text[-1500:]
    assert "suspended?" not in text
    assert (
        "node1: the host stopped the job: it heard nothing from this controller for "
        "--heartbeat-timeout (2 s), though the controller was not suspended"
    ) in text, text[-1500:]
    assert "job failed: node1 lost touch with the controller (the network between here and " in (
        text
    )
