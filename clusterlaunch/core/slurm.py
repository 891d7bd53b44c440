"""Hosts from the current Slurm allocation (``clusterlaunch run slurm ...``).

Like :mod:`clusterlaunch.core.hostfile`, a pure parser (:func:`slurm_inventory`,
environment in, :class:`~clusterlaunch.core.model.Inventory` out, tested by
equality) with one thin effectful loader (:func:`load_slurm_inventory`) that
lives in :mod:`clusterlaunch.cli.slurm`: it reads ``os.environ`` and, only for a
node list ClusterShell cannot read, asks ``scontrol show hostnames``.

Variables read (all set by ``salloc``/``sbatch`` inside an allocation):

* ``SLURM_JOB_NODELIST`` — the nodes, e.g. ``gpu[01-03,07]``; node order (and
  so rank order) is Slurm's (its syntax, and ``SLURM_JOB_ID``: :mod:`.slurmnodes`).
* processes per node, the first one that is set and non-zero: the
  ``--gpus-per-host`` option, ``SLURM_GPUS_ON_NODE``, ``SLURM_GPUS_PER_NODE``
  (``8`` or ``a100:8``), ``SLURM_TASKS_PER_NODE`` (``2(x3),1``: one count per node).
  Inside a job step (``SLURM_STEP_ID`` set) the first and last are the step's,
  not the allocation's, and are not read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostranges import expand_hosts
from clusterlaunch.core.model import HostSpec, Inventory, SshTarget
from clusterlaunch.core.slurmnodes import NODELIST_VAR, Expand, expand_nodelist

SLURM_HOSTS = "slurm"
"""The HOSTS word that means "the hosts of the current Slurm allocation"."""

GPU_VARS = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE")
TASKS_VAR = "SLURM_TASKS_PER_NODE"
STEP_VAR = "SLURM_STEP_ID"

_COUNT_ITEM = re.compile(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?")  # 9 digits: int() stays cheap
_DIGITS = re.compile(r"[0-9]{1,9}")


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


def processes_per_node(env: Mapping[str, str], gpus_per_host: int | None, nodes: int) -> list[int]:
    """How many processes torchrun starts on each of ``nodes`` nodes."""
    if gpus_per_host is not None:
        if gpus_per_host < 1:
            raise UsageError(f"--gpus-per-host {gpus_per_host}: use a number of 1 or more")
        return [gpus_per_host] * nodes
    step = env.get(STEP_VAR)
    # Inside a job step (srun --pty bash) srun has replaced the per-node counts with
    # the step's own (salloc -n8, then srun --pty bash: SLURM_TASKS_PER_NODE=1), and
    # the allocation's task layout is in no variable: only its GPU request is left.
    on_node = "" if step is not None else env.get(GPU_VARS[0], "").strip()
    if on_node:
        count = _count(on_node, GPU_VARS[0])
        if count:
            return [count] * nodes
    per_node = env.get(GPU_VARS[1], "").strip()
    if per_node:
        count = gpu_request(per_node)
        if count:
            return [count] * nodes
    if step is not None:
        raise UsageError(
            f"inside a job step ({STEP_VAR}={limits.shown(step)}), whose "
            f"{TASKS_VAR} and {GPU_VARS[0]} are the step's counts, not the allocation's: "
            f"pass --gpus-per-host N (or run clusterlaunch outside srun, in the salloc "
            "shell or the batch script)"
        )
    tasks = env.get(TASKS_VAR, "").strip()
    if tasks:
        counts = expand_counts(tasks, TASKS_VAR)
        if len(counts) != nodes:
            raise UsageError(
                f"{TASKS_VAR}={tasks!r} gives {len(counts)} node(s) but {NODELIST_VAR} has "
                f"{nodes}; pass --gpus-per-host N"
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
