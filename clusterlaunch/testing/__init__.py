"""Test infrastructure shipped with the package: a real simulated cluster on one machine.

Two tiers share one client-side API (``ssh_config`` with one alias per host, a generated
``known_hosts``, a client key, ``hosts``, ``markers()``):

* :class:`LoopbackCluster` — host i listens on 127.0.0.(11+i); works without root.
  :class:`SshVariantCluster` is one with real sites' SSH setups: host and user
  certificates, a config split with ``Include``, ``MaxStartups``, default kex.
* ``tests/netns.py``'s ``NetnsCluster`` (test-only) — each host is a network namespace
  on a private bridge, with its own hostname; root only.  Supports partitions.

:mod:`.orphans` finds processes that a test left running on the hosts.
:mod:`.fakes` (with :mod:`.agentscript`) is the other end of the scale: a scripted
``Connection`` with no process behind it, for the supervisor's unit tests.
Stdlib only: the product's SSH code (paramiko) must not be what the cluster relies on.
"""

from clusterlaunch.testing.detached import start_detached, stop_detached
from clusterlaunch.testing.loopback import LoopbackCluster
from clusterlaunch.testing.orphans import ProcInfo, find_processes, kill_processes, wait_until_gone
from clusterlaunch.testing.sshd import (
    DEFAULT_PORT,
    PortInUseError,
    SimClusterError,
    SimHost,
    find_free_port,
    loopback_addrs,
    port_is_free,
)
from clusterlaunch.testing.sshvariants import SshVariantCluster

__all__ = [
    "DEFAULT_PORT",
    "LoopbackCluster",
    "PortInUseError",
    "ProcInfo",
    "SimClusterError",
    "SimHost",
    "SshVariantCluster",
    "find_free_port",
    "find_processes",
    "kill_processes",
    "loopback_addrs",
    "port_is_free",
    "start_detached",
    "stop_detached",
    "wait_until_gone",
]
