"""Hosts from the current Slurm allocation (``clusterlaunch run slurm ...``).

Like :mod:`clusterlaunch.core.hostfile`, a pure parser (:func:`slurm_inventory`,
environment in, :class:`~clusterlaunch.core.model.Inventory` out, tested by
equality) with one thin effectful loader (:func:`load_slurm_inventory`) that
lives in :mod:`clusterlaunch.cli.slurm`: it reads ``os.environ`` and, only for a
node list ClusterShell cannot read, asks ``scontrol show hostnames``.

Variables read (all set by ``salloc``/``sbatch`` inside an allocation):

* ``SLURM_JOB_NODELIST`` — the nodes, e.g. ``gpu[01-03,07]``; node order (and
  so rank order) is Slurm's.
* processes per node, the first one that is set and non-zero: the
  ``--gpus-per-host`` option, ``SLURM_GPUS_ON_NODE``, ``SLURM_GPUS_PER_NODE``
  (``8`` or ``a100:8``), ``SLURM_TASKS_PER_NODE`` (``2(x3),1``: one count per node).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostranges import HostRangeError, expand_hosts
from clusterlaunch.core.model import HostSpec, Inventory, SshTarget

SLURM_HOSTS = "slurm"
"""The HOSTS word that means "the hosts of the current Slurm allocation"."""

NODELIST_VAR = "SLURM_JOB_NODELIST"
GPU_VARS = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE")
TASKS_VAR = "SLURM_TASKS_PER_NODE"

# Characters Slurm node names and host lists use. Anything else (notably
# ClusterShell's set operators ! & ^ and its @group syntax) is refused rather
# than given a meaning Slurm never meant.
_NODELIST_CHARS = re.compile(r"[A-Za-z0-9._\-\[\],]+")
_COUNT_ITEM = re.compile(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?")  # 9 digits: int() stays cheap
_DIGITS = re.compile(r"[0-9]{1,9}")

Expand = Callable[[str], list[str]]


def slurm_inventory(
    env: Mapping[str, str], gpus_per_host: int | None, expand: Expand = expand_hosts
) -> Inventory:
    """The allocation in ``env`` as an inventory: one host per node, Slurm's order.

    ``gpus_per_host`` (``--gpus-per-host``) wins over the environment.
    ``expand`` turns one comma-free piece of the node list into names; it
    raises :class:`~clusterlaunch.core.hostranges.HostRangeError` for a bad one.
    """
    nodes = allocation_nodes(env, expand)
    counts = processes_per_node(env, gpus_per_host, len(nodes))
    hosts = tuple(HostSpec(host=n, gpus=count) for n, count in zip(nodes, counts, strict=True))
    # master_addr stays None: the planner then uses node 0's name as Slurm
    # gives it, which resolves on every node of the cluster.
    return Inventory(path=SLURM_HOSTS, hosts=hosts)


def allocation_nodes(env: Mapping[str, str], expand: Expand = expand_hosts) -> list[str]:
    """The node names of ``SLURM_JOB_NODELIST``, in Slurm's order."""
    text = env.get(NODELIST_VAR)
    if text is None:
        raise UsageError(
            f"not inside a Slurm allocation ({NODELIST_VAR} unset); "
            "run under salloc/sbatch or pass a hosts file"
        )
    return expand_nodelist(text.strip(), expand)


def expand_nodelist(text: str, expand: Expand = expand_hosts) -> list[str]:
    """Expand a Slurm host list, keeping the order of its comma-separated parts.

    ClusterShell sorts a whole NodeSet, so each top-level part is expanded on
    its own (``b[1-2],a1`` stays ``b1 b2 a1``, as Slurm ordered the nodes).
    """
    where = f"{NODELIST_VAR}={text!r}"
    if not text:
        raise UsageError(f"{where}: no nodes; run under salloc/sbatch or pass a hosts file")
    if not _NODELIST_CHARS.fullmatch(text):
        raise UsageError(
            f"{where}: unexpected characters for a Slurm node list "
            "(expected names and ranges like gpu[01-04],cpu7); pass a hosts file instead"
        )
    names: list[str] = []
    for part in split_nodelist(text):
        try:
            names.extend(expand(part))
        except HostRangeError as exc:
            raise UsageError(f"{where}: {exc}; or pass a hosts file") from None
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UsageError(f"{where}: lists node {name} twice; list each node once")
        seen.add(name)
    return names


def split_nodelist(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets (``a[1,3],b`` → ``a[1,3]``, ``b``)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    empty = [p for p in parts if not p]
    if empty:
        raise UsageError(f"{NODELIST_VAR}={text!r}: empty entry between commas")
    return parts


def processes_per_node(env: Mapping[str, str], gpus_per_host: int | None, nodes: int) -> list[int]:
    """How many processes torchrun starts on each of ``nodes`` nodes."""
    if gpus_per_host is not None:
        if gpus_per_host < 1:
            raise UsageError(f"--gpus-per-host {gpus_per_host}: use a number of 1 or more")
        return [gpus_per_host] * nodes
    on_node = env.get(GPU_VARS[0], "").strip()
    if on_node:
        count = _count(on_node, GPU_VARS[0])
        if count:
            return [count] * nodes
    per_node = env.get(GPU_VARS[1], "").strip()
    if per_node:
        count = gpu_request(per_node)
        if count:
            return [count] * nodes
    tasks = env.get(TASKS_VAR, "").strip()
    if tasks:
        counts = expand_counts(tasks, TASKS_VAR)
        if len(counts) != nodes:
            raise UsageError(
                f"{TASKS_VAR}={tasks!r} gives {len(counts)} node(s) but {NODELIST_VAR} has "
                f"{nodes} (inside a job step?); pass --gpus-per-host N"
            )
        return counts
    raise UsageError(
        f"cannot tell how many processes to start per node: none of {', '.join(GPU_VARS)}, "
        f"{TASKS_VAR} is set (or all are 0); pass --gpus-per-host N"
    )


def expand_counts(text: str, var: str) -> list[int]:
    """Slurm's compressed per-node counts: ``2(x3),1`` → ``[2, 2, 2, 1]``."""
    given = f"{var}={limits.shown(text)}"
    counts: list[int] = []
    for item in text.split(","):
        match = _COUNT_ITEM.fullmatch(item.strip())
        if match is None:
            raise UsageError(
                f"{given}: cannot read {limits.shown(item)}; expected counts like 2(x3),1, "
                "or pass --gpus-per-host N"
            )
        count, repeat = int(match[1]), int(match[2] or 1)
        if count < 1 or repeat < 1:
            raise UsageError(f"{given}: {item!r} has a zero count; pass --gpus-per-host N")
        if len(counts) + repeat > limits.MAX_HOSTS:  # before the list is built: 1(x10**9)
            raise UsageError(
                f"{given}: more than {limits.MAX_HOSTS:,} nodes, the limit for a job; "
                "pass --gpus-per-host N"
            )
        counts += [count] * repeat
    return counts


def gpu_request(text: str) -> int:
    """``SLURM_GPUS_PER_NODE``: ``8``, ``a100:8``, or ``a100:4,v100:2`` (summed)."""
    total = 0
    for item in text.split(","):
        number = item.strip().rpartition(":")[2]
        if not _DIGITS.fullmatch(number):
            raise UsageError(
                f"{GPU_VARS[1]}={limits.shown(text)}: cannot read a GPU count in "
                f"{limits.shown(item)} "
                "(expected 8 or type:8); pass --gpus-per-host N"
            )
        total += int(number)
    return total


def _count(text: str, var: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise UsageError(
            f"{var}={limits.shown(text)}: expected a number of GPUs (at most 9 digits); "
            "pass --gpus-per-host N"
        )
    return int(text)


def srun_targets(hosts: Sequence[HostSpec]) -> tuple[SshTarget, ...]:
    """Targets for hosts reached through ``srun``: the Slurm node name, no SSH config.

    ``-w`` needs the name Slurm knows, and peers dial node 0 by that name too.
    """
    return tuple(SshTarget(alias=spec.host, hostname=spec.host, port=0) for spec in hosts)


def check_in_allocation(
    inventory: Inventory, env: Mapping[str, str], expand: Expand = expand_hosts
) -> None:
    """``--transport srun`` with a hosts file: every host must be a node of the allocation.

    srun would refuse such a host only after other hosts' steps had started.
    """
    nodes = set(allocation_nodes(env, expand))
    outside = [spec.host for spec in inventory.hosts if spec.host not in nodes]
    if outside:
        raise UsageError(
            f"{inventory.path}: {', '.join(outside)} not in this Slurm allocation "
            f"({NODELIST_VAR}={env.get(NODELIST_VAR)}); use Slurm node names, "
            "or --transport ssh"
        )
