"""The command line's restart part: ``--max-restarts``, ``--restart-backoff``, ``--min-hosts``
and the hosts file's ``spare: true`` hosts, checked before any host is contacted.

The policy itself is :mod:`clusterlaunch.core.restarts`; the loop that applies
it, :mod:`clusterlaunch.controller.restarts`. See docs/resilience.md.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from clusterlaunch.core import defaults, limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, Inventory, SshTarget
from clusterlaunch.core.restarts import RestartPolicy

Spares = tuple[tuple[HostSpec, SshTarget], ...]


def add_options(parser: argparse.ArgumentParser) -> None:
    """Job-level restarts after a failed rank or a lost host (docs/resilience.md)."""
    group = parser.add_argument_group("restarts (docs/resilience.md)")
    group.add_argument(
        "--max-restarts",
        type=limits.MAX_RESTARTS_FLAG,
        metavar="N",
        help="after a failed rank or a lost host, run the job again up to N times on the "
        "hosts that pass a new preflight (default: the hosts file's max_restarts, else 0)",
    )
    group.add_argument(
        "--restart-backoff",
        type=limits.RESTART_BACKOFF,
        default=defaults.RESTART_BACKOFF_S,
        metavar="SECONDS",
        help="wait before the first restart, doubled for each further one up to "
        f"{defaults.RESTART_BACKOFF_MAX_S:g} s (default {defaults.RESTART_BACKOFF_S:g})",
    )
    group.add_argument(
        "--min-hosts",
        type=limits.MIN_HOSTS,
        metavar="M",
        help="a restarted job may shrink to M hosts when no spare takes a lost host's place "
        "(default: every non-spare host)",
    )


def split_spares(
    inventory: Inventory, targets: tuple[SshTarget, ...], command: str = "run"
) -> tuple[Inventory, tuple[SshTarget, ...], Spares]:
    """``run``'s job hosts and its spares; ``exec`` and ``check`` use every host, spares too."""
    if command != "run" or not any(spec.spare for spec in inventory.hosts):
        return inventory, targets, ()
    pairs = list(zip(inventory.hosts, targets, strict=True))
    active = [(spec, target) for spec, target in pairs if not spec.spare]
    spares = tuple((spec, target) for spec, target in pairs if spec.spare)
    hosts = tuple(spec for spec, _ in active)
    return replace(inventory, hosts=hosts), tuple(t for _, t in active), spares


def policy(args: argparse.Namespace, inventory: Inventory, spares: Spares) -> RestartPolicy:
    """The restart policy of ``run`` (flags win over the hosts file's ``max_restarts:``)."""
    if args.command != "run":
        return RestartPolicy(min_hosts=len(inventory.hosts))
    given = args.max_restarts if args.max_restarts is not None else inventory.max_restarts
    hosts = len(inventory.hosts)
    min_hosts = hosts if args.min_hosts is None else args.min_hosts
    if args.min_hosts is not None and not given:
        raise UsageError(
            f"--min-hosts {args.min_hosts}: it applies to restarts; add --max-restarts N"
        )
    if min_hosts > hosts:
        spare_note = f" (and {len(spares)} spare(s), which never count)" if spares else ""
        raise UsageError(
            f"--min-hosts {min_hosts}: the job has {hosts} non-spare host(s){spare_note}; "
            f"use at most {hosts}"
        )
    return RestartPolicy(max_restarts=given or 0, backoff=args.restart_backoff, min_hosts=min_hosts)
