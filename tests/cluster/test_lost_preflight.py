"""A host lost before the job starts (its setup or its checks running): named, in seconds.

The loss is a host's session sshd frozen with SIGSTOP (no FIN, no RST, no answer: as
a partition looks to the controller), or a real partition on the network-namespace
tier. Either used to hold the controller for up to an hour (paramiko's channel-open
wait, in the kill of the lost host's setup), Ctrl-C and SIGTERM needing three presses;
or until the preflight's deadline, the healthy hosts blamed with it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from clusterlaunch.core.errors import HOST_LOST
from clusterlaunch.testing import find_processes, wait_until_gone
from clusterlaunch.testing.loopback import LoopbackCluster
from tests.cluster.support import PYTHON, start_cli, wait_running, write_hosts

pytestmark = [pytest.mark.cluster]

SETUP = "sleep 37"  # told apart from any other sleep on the hosts
SETUP_TIMEOUT = "12"  # the lost host's own watchdog ends the setup once the test is over
BOUND_S = 20.0  # keepalives know after ~6 s; it used to take minutes (or an hour)


@contextmanager
def _frozen_session(cluster: LoopbackCluster, host: str) -> Iterator[None]:
    """SIGSTOP the sshd serving ``host``'s session (the parent of its shell), SIGCONT after."""
    processes = find_processes([cluster.host(host).marker])
    ours = {p.pid for p in processes}
    sshds = {p.ppid for p in processes if p.ppid not in ours}
    assert len(sshds) == 1, processes
    sshd = sshds.pop()
    assert b"sshd" in Path(f"/proc/{sshd}/cmdline").read_bytes()
    os.kill(sshd, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(sshd, signal.SIGCONT)


def _ended(process: subprocess.Popen[bytes], since: float) -> tuple[int, str, float]:
    """The exit status, output (stdout, stderr) and seconds since ``since``, at most
    :data:`BOUND_S` away."""
    try:
        out, err = process.communicate(timeout=max(1.0, since + BOUND_S - time.monotonic()))
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"still running {BOUND_S} s on: {(out + err).decode()[-1500:]}")
    return process.returncode, (out + err).decode(), time.monotonic() - since


def _no_leftovers(cluster: LoopbackCluster) -> None:
    """The lost host's setup ends by its watchdog (--setup-timeout), nothing else stays."""
    assert wait_until_gone(cluster.markers(), timeout=30.0) == []


SIGNALS = {
    "SIGINT": (signal.SIGINT, 130, "interrupted (Ctrl-C)"),
    "SIGTERM": (signal.SIGTERM, 143, ""),
}
COMMANDS = {
    "run": ["sleeper.py"],  # the agents' preflight
    "check": [],  # the probe's
    "exec": ["--", "true"],  # the agent's setup, before its job
    "ps": [],  # jobctl behind the setup (kill and stacks wait alike)
}


@pytest.mark.parametrize(
    ("command", "name"),
    [
        ("run", "SIGINT"),
        ("run", "SIGTERM"),
        ("check", "SIGINT"),
        ("exec", "SIGINT"),
        ("ps", "SIGINT"),
    ],
)
def test_one_signal_ends_it_with_a_host_lost_in_its_setup(
    sim_cluster_factory, tmp_path: Path, command: str, name: str
) -> None:
    cluster = sim_cluster_factory(2)
    setup = {"setup": SETUP}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    argv = ("--setup-timeout", SETUP_TIMEOUT, str(hosts), *COMMANDS[command])
    process = start_cli(command, cluster, *argv)
    sig, status, said = SIGNALS[name]
    try:
        wait_running(cluster, "node1", SETUP)
        time.sleep(0.5)  # its PID line read: the setup is one the controller would kill
        with _frozen_session(cluster, "node1"):
            signalled = time.monotonic()
            process.send_signal(sig)  # once: before, it took three
            code, err, took = _ended(process, signalled)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == status, err[-1500:]
    assert said in err
    print(f"{command} {name}: exit {took:.1f} s after the signal")
    _no_leftovers(cluster)


@pytest.mark.parametrize("command", ["run", "check", "ps"])
def test_a_host_lost_in_its_setup_is_named_in_seconds(
    sim_cluster_factory, tmp_path: Path, command: str
) -> None:
    cluster = sim_cluster_factory(2)
    quick, slow = {"setup": "sleep 0.5"}, {"setup": SETUP}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, quick), ("node1", 1, slow)])
    argv = ("--setup-timeout", SETUP_TIMEOUT, str(hosts), *COMMANDS[command])
    process = start_cli(command, cluster, *argv)
    try:
        wait_running(cluster, "node1", SETUP)
        with _frozen_session(cluster, "node1"):
            code, err, took = _ended(process, time.monotonic())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert re.search(rf"node1\b.*{re.escape(HOST_LOST)}", err), err[-1500:]
    assert "setup did not finish" not in err, err[-1500:]  # the host was lost, not slow
    if command != "ps":
        assert code == 2, err[-1500:]
        assert re.search(rf"node1 .*FAIL .*{re.escape(HOST_LOST)}", err), err[-1500:]
        assert not re.search(r"node0 .*FAIL", err), err[-1500:]  # the healthy host passed
    print(f"{command}: ended {took:.1f} s after the host was lost")
    _no_leftovers(cluster)


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_host_lost_before_its_checks_answer_fails_only_that_host(
    sim_cluster_factory, tmp_path: Path, command: str
) -> None:
    """No setup: the host is lost while its interpreter starts (a slow one, here)."""
    cluster = sim_cluster_factory(2)
    slow = tmp_path / "slowpy"
    slow.write_text(f'#!/bin/sh\nsleep 7\nexec {PYTHON} "$@"\n')
    slow.chmod(0o755)
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"python": str(slow)})]
    )
    process = start_cli(command, cluster, str(hosts), *COMMANDS[command])
    try:
        wait_running(cluster, "node1", "sleep 7")
        with _frozen_session(cluster, "node1"):
            code, err, took = _ended(process, time.monotonic())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 2, err[-1500:]
    assert re.search(rf"node1 .*FAIL .*{re.escape(HOST_LOST)}", err), err[-1500:]
    assert not re.search(r"node0 .*FAIL", err), err[-1500:]
    if command == "run":
        assert "preflight failed on 1 host(s)" in err, err[-1500:]
    print(f"{command}: failed {took:.1f} s after the host was lost")
    _no_leftovers(cluster)


@pytest.mark.netns
def test_a_partition_during_a_setup_fails_the_preflight_naming_the_host(
    netns_cluster_factory, tmp_path: Path
) -> None:
    cluster = netns_cluster_factory(2)
    quick, slow = {"setup": "sleep 0.5"}, {"setup": SETUP}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, quick), ("node1", 1, slow)])
    process = start_cli("run", cluster, "--setup-timeout", SETUP_TIMEOUT, str(hosts), "sleeper.py")
    try:
        wait_running(cluster, "node1", SETUP)
        cluster.partition("node1")
        try:
            code, err, took = _ended(process, time.monotonic())
        finally:
            cluster.heal("node1")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 2, err[-1500:]
    assert re.search(rf"node1 .*FAIL .*{re.escape(HOST_LOST)}", err), err[-1500:]
    assert not re.search(r"node0 .*FAIL", err), err[-1500:]
    print(f"partition: preflight failed {took:.1f} s after it")
    _no_leftovers(cluster)
