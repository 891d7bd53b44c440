"""The command line's Slurm part: ``HOSTS=slurm``, ``--transport``, ``--gpus-per-host``.

Kept out of :mod:`clusterlaunch.cli.main` so that the CLI only registers these
options and asks :func:`hosts` for the inventory; bad input raises
:class:`~clusterlaunch.core.errors.UsageError`, which the CLI maps to exit 2.
See docs/slurm.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import replace

from clusterlaunch.core import includes, limits, slurm, slurmnodes
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostfields import AUTO
from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.core.hostnames import address_problem, master_address_problem
from clusterlaunch.core.hostranges import HostRangeError, expand_hosts
from clusterlaunch.core.model import Inventory, SshTarget
from clusterlaunch.core.sameserver import refuse_same_server
from clusterlaunch.transport import TRANSPORTS
from clusterlaunch.transport.local import login_shell
from clusterlaunch.transport.srun import SRUN, SRUN_MISSING, srun_argv
from clusterlaunch.transport.sshconfig import resolve_targets


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--transport``, ``--gpus-per-host`` and ``--master-addr`` (run, exec, check)."""
    group = parser.add_argument_group(
        "slurm", "HOSTS may be the word slurm: the nodes of the current Slurm allocation"
    )
    group.add_argument(
        "--transport",
        choices=TRANSPORTS,
        help="how hosts are reached: srun starts a job step on each "
        "(default: srun for HOSTS=slurm, else ssh)",
    )
    group.add_argument(
        "--gpus-per-host",
        metavar="N",
        type=_gpus_per_host,
        help="processes per host, or auto: each host's accelerator count (replaces the hosts "
        "file's gpus:; with HOSTS=slurm the default is SLURM_GPUS_ON_NODE, "
        "SLURM_GPUS_PER_NODE or SLURM_TASKS_PER_NODE)",
    )
    group.add_argument(
        "--master-addr",
        metavar="ADDR",
        help="the address every host dials for the rendezvous "
        "(default: the hosts file's master_addr, else node 0's address or Slurm name)",
    )


def _gpus_per_host(text: str) -> int | str:
    return AUTO if text == AUTO else int(limits.GPUS_PER_HOST(text))


def hosts(args: argparse.Namespace) -> tuple[Inventory, tuple[SshTarget, ...], str]:
    """The inventory (hosts file or Slurm allocation), its targets, and the transport."""
    gpus = args.gpus_per_host
    from_slurm = args.hosts == slurm.SLURM_HOSTS
    if from_slurm:  # with auto, any count will do: override_gpus replaces it
        slurmnodes.job_id(os.environ)  # an allocation has both, whichever transport
        inventory = load_slurm_inventory(os.environ, 1 if gpus == AUTO else gpus)
        _check_allocation_size(inventory)
    else:
        inventory = load_inventory(args.hosts)
    if gpus is not None:
        inventory = includes.override_gpus(inventory, None if gpus == AUTO else gpus)
    selected = includes.select_hosts(inventory, args.include, args.exclude)
    if selected is not inventory:  # a localhost made node 0 by it cannot be the master
        flag = f"--include {args.include}" if args.include else f"--exclude {args.exclude}"
        inventory = replace(inventory, notes=selected.notes).narrowed(selected.hosts, flag)
    if args.master_addr is not None:
        problem = address_problem(args.master_addr) or master_address_problem(
            args.master_addr, "--master-addr"
        )
        if problem is not None:
            raise UsageError(f"--master-addr {limits.shown(args.master_addr)}: {problem}")
        inventory = replace(inventory, master_addr=args.master_addr)
    transport = args.transport or ("srun" if from_slurm else "ssh")
    if transport == "ssh":
        targets = tuple(resolve_targets(args.ssh_config, inventory.hosts))
        refuse_same_server(inventory, targets)
        return inventory, targets, transport
    if getattr(args, "sync", False):  # rsync and SFTP go over SSH; srun carries no files
        raise UsageError(
            "--sync copies over SSH, and the job's steps start with srun: add --transport "
            "ssh (the allocation's nodes over SSH), or use a workdir on a shared file system"
        )
    if not from_slurm:
        slurmnodes.job_id(os.environ)
        require_in_allocation(inventory, os.environ)
    # Said once, before anything starts (not once per host by the preflight); a dry
    # run only shows the srun line, so it needs no srun.
    if not args.dry_run and shutil.which(SRUN) is None:
        raise UsageError(SRUN_MISSING)
    return inventory, slurm.srun_targets(inventory.hosts), transport


def refuse_the_word(args: argparse.Namespace) -> None:
    """``ps``/``kill``/``stacks`` reach hosts over SSH only: ``slurm`` is not their HOSTS."""
    if args.hosts == slurm.SLURM_HOSTS:
        raise UsageError(
            f"{args.command} reaches hosts over SSH only and takes a hosts file, not the word "
            f"{slurm.SLURM_HOSTS}: write the allocation's nodes into one (scontrol show "
            'hostnames "$SLURM_JOB_NODELIST" > nodes.txt) and pass that (docs/slurm.md); '
            f"a hosts file named {slurm.SLURM_HOSTS} is ./{slurm.SLURM_HOSTS}"
        )


def _check_allocation_size(inventory: Inventory) -> None:
    """The limits a hosts file has, for an allocation (docs/cli.md)."""
    world = sum(spec.gpus or 0 for spec in inventory.hosts)
    if len(inventory.hosts) > limits.MAX_HOSTS or world > limits.MAX_WORLD_SIZE:
        raise UsageError(
            f"the Slurm allocation has {len(inventory.hosts):,} nodes and {world:,} ranks; "
            f"a job has at most {limits.MAX_HOSTS:,} hosts and {limits.MAX_WORLD_SIZE:,} ranks"
        )


def dry_run_note(transport: str) -> str:
    """For ``--dry-run``: how each command of the plan reaches its host, when not over SSH."""
    if transport != "srun":
        return ""
    line = " ".join(srun_argv("HOST", "COMMAND", login_shell(), slurmnodes.job_id(os.environ)))
    return f"# each host's command runs as a step of the Slurm job:\n# {line}\n"


# -- the effectful loader: the environment, and scontrol --------------------


def load_slurm_inventory(env: Mapping[str, str], gpus_per_host: int | None) -> Inventory:
    """The allocation's inventory, asking ``scontrol`` about parts ClusterShell cannot read."""
    return slurm.slurm_inventory(env, gpus_per_host, expand=_expand_or_ask_scontrol)


def require_in_allocation(inventory: Inventory, env: Mapping[str, str]) -> None:
    """``core.slurm.check_in_allocation``, asking ``scontrol`` like the loader above."""
    slurm.check_in_allocation(inventory, env, expand=_expand_or_ask_scontrol)


def _expand_or_ask_scontrol(part: str) -> list[str]:
    try:
        return expand_hosts(part)
    except HostRangeError:
        names = scontrol_hostnames(part)
        if not names:
            raise
        return names


def scontrol_hostnames(part: str) -> list[str]:
    """``scontrol show hostnames PART``, or ``[]`` when scontrol is absent or fails."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return []
    try:
        result = subprocess.run(
            [scontrol, "show", "hostnames", part],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return result.stdout.split() if result.returncode == 0 else []
