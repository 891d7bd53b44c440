"""Command line for the loopback simulated cluster.

    python -m clusterlaunch.testing up --hosts 8 --dir D [--port P]
    python -m clusterlaunch.testing down --dir D
    python -m clusterlaunch.testing timing [--hosts 8]

``up`` leaves the sshd servers running after it exits (their PIDs are recorded in
``D/simcluster.json``); ``down`` stops them and removes D.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.testing import (
    DEFAULT_PORT,
    LoopbackCluster,
    SimClusterError,
    find_free_port,
    loopback_addrs,
    start_detached,
    stop_detached,
)


def _addrs(n_hosts: int, first_octet: int) -> list[str]:
    return loopback_addrs(n_hosts, first_octet)


def _up(args: argparse.Namespace) -> None:
    port = args.port or find_free_port(_addrs(args.hosts, args.first_octet), DEFAULT_PORT)
    cluster = start_detached(
        args.hosts, args.dir, port=port, first_host_octet=args.first_octet,
        name_prefix=args.prefix,
    )  # fmt: skip
    for host in cluster.hosts:
        print(f"{host.name}\t{host.addr}:{host.port}\tpid {host.pid}")
    print(f"ssh -F {cluster.ssh_config} {cluster.names[0]}")


def _down(args: argparse.Namespace) -> None:
    if not os.path.exists(args.dir):  # already down: make `down` idempotent
        print(f"nothing to stop: {args.dir} does not exist")
        return
    for proc in stop_detached(args.dir):
        print(f"killed leftover process {proc}")


def _timing(args: argparse.Namespace) -> None:
    port = args.port or find_free_port(_addrs(args.hosts, 11), DEFAULT_PORT)
    with tempfile.TemporaryDirectory(prefix="simcluster-timing-") as tmp:
        for label in ("fresh keys", "cached keys"):
            cluster = LoopbackCluster(args.hosts, tmp, port=port)
            began = time.perf_counter()
            cluster.start()
            elapsed = time.perf_counter() - began
            cluster.stop()
            print(f"{args.hosts} hosts up in {elapsed:.3f} s ({label})")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m clusterlaunch.testing")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a detached loopback cluster in --dir")
    up.add_argument("--hosts", type=int, default=4)
    up.add_argument("--dir", required=True)
    up.add_argument("--port", type=int, default=None, help="default: first free from 22220")
    up.add_argument("--first-octet", type=int, default=11)
    up.add_argument("--prefix", default="node")
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop the cluster recorded in --dir and remove it")
    down.add_argument("--dir", required=True)
    down.set_defaults(func=_down)
    timing = sub.add_parser("timing", help="measure how long the hosts take to come up")
    timing.add_argument("--hosts", type=int, default=8)
    timing.add_argument("--port", type=int, default=None)
    timing.set_defaults(func=_timing)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except SimClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitStatus.FAILED
    return ExitStatus.OK


if __name__ == "__main__":
    sys.exit(main())
