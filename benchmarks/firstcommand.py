"""The first command on a fresh connection: connect, authenticate, run ``true``, see it exit.

Three ways, alternating round after round, one host of the harness's cluster
(the servers' default key exchange):

* **clusterlaunch**: its paramiko transport in this process
  (``sshconnect.connect``, then ``start("true")`` until it has finished): the
  path every ``run`` and ``exec`` takes to each host before its agent starts;
* **paramiko as shipped** (baseline): ``SSHClient.connect`` with its own socket,
  ``exec_command("true")``, ``recv_exit_status()``, same key, same host;
* **ssh by hand** (baseline): ``ssh -F CONFIG HOST true``, a process of its own
  (its start-up, a few ms, is in it).

Both in-process figures exclude Python's start-up. What separates the first
two is the socket (:mod:`clusterlaunch.transport.sshsocket`): without
``TCP_NODELAY`` and ``TCP_QUICKACK`` the handshake and the first channel each
waited ~40 ms on a delayed ACK. ``ssh`` waits the second 40 ms too.
"""

from __future__ import annotations

import subprocess
import time

import paramiko

from benchmarks.core import Result
from benchmarks.env import Bench
from benchmarks.processes import BenchError
from benchmarks.sshlibs_client import wait_for_all
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import SshSettings, hostkeys, sshconnect
from clusterlaunch.transport.identities import IdentityFiles
from clusterlaunch.transport.sshconfig import resolve_targets

NAME = "firstcommand"
NEEDS = 1
"""How many simulated hosts this measurement uses."""


def by_clusterlaunch(bench: Bench, host: str) -> tuple[float, float]:
    """(connect s, first command s) through clusterlaunch's transport."""
    config = str(bench.ssh_config)
    target = resolve_targets(config, [HostSpec(host=host, gpus=1)])[0]
    started = time.perf_counter()
    settings = SshSettings(config_path=config)
    connection = sshconnect.connect(target, settings, hostkeys.KnownHosts(), IdentityFiles())
    connected = time.perf_counter()
    try:
        process = connection.start("true")
        wait_for_all([process])  # read as it is readable, as the controller's read loop does
        if process.exit_status() != 0:
            raise BenchError(f"true on {host} exited {process.exit_status()}")
        done = time.perf_counter()
        process.close()
    finally:
        connection.close()
    return connected - started, done - connected


def by_paramiko(bench: Bench, host: str) -> tuple[float, float]:
    """(connect s, first command s) through paramiko's SSHClient, as it comes."""
    target = resolve_targets(str(bench.ssh_config), [HostSpec(host=host, gpus=1)])[0]
    client = paramiko.SSHClient()
    for path in target.known_hosts_files:
        client.load_host_keys(path)
    started = time.perf_counter()
    client.connect(
        target.hostname,
        port=target.port,
        username=target.user,
        key_filename=list(target.identity_files),  # type: ignore[arg-type]  # a list works
        look_for_keys=False,
        allow_agent=False,
    )
    connected = time.perf_counter()
    try:
        _, stdout, _ = client.exec_command("true")
        if stdout.channel.recv_exit_status() != 0:
            raise BenchError(f"true on {host} failed through paramiko")
        done = time.perf_counter()
    finally:
        client.close()
    return connected - started, done - connected


def by_ssh(bench: Bench, host: str) -> float:
    """Seconds for ``ssh HOST true``, from its start to its exit."""
    started = time.perf_counter()
    done = subprocess.run(["ssh", "-F", str(bench.ssh_config), host, "true"], env=bench.env)
    if done.returncode != 0:
        raise BenchError(f"ssh {host} true exited {done.returncode}")
    return time.perf_counter() - started


def run(bench: Bench) -> list[Result]:
    """All three, alternating, ``repeat`` rounds after a warm-up."""
    host = bench.names(1)[0]
    label = "first command on a fresh connection"
    ours = Result(f"{NAME}.clusterlaunch", NAME, f"{label}: clusterlaunch's transport", "ms")
    ours.baseline = f"{NAME}.paramiko"
    shipped = Result(f"{NAME}.paramiko", NAME, f"{label}: paramiko as shipped", "ms")
    ssh = Result(f"{NAME}.ssh", NAME, f"{label}: ssh HOST true (its start included)", "ms")
    shipped.role = ssh.role = "baseline"
    ours.extra = {"connect_ms": [], "command_ms": []}
    shipped.extra = {"connect_ms": [], "command_ms": []}
    for index in bench.rounds(NAME):
        mine, theirs, plain = (
            by_clusterlaunch(bench, host),
            by_paramiko(bench, host),
            by_ssh(bench, host),
        )
        if index < 0:
            continue
        for result, (connect, command) in ((ours, mine), (shipped, theirs)):
            result.samples.append(1000 * (connect + command))
            result.extra["connect_ms"].append(round(1000 * connect, 1))
            result.extra["command_ms"].append(round(1000 * command, 1))
        ssh.samples.append(1000 * plain)
    leftovers = bench.assert_clean()
    ours.problems += leftovers
    return [ours, shipped, ssh]


__all__ = ["NAME", "run"]
