"""The rank plan: a pure function from hosts and options to per-host commands.

In the manner of Horovod's ``get_host_assignments``: data in, data out, no I/O.
Node ranks follow the hosts file; node k's global ranks start at the sum of the
process counts of nodes 0..k-1, exactly as torchrun's static rendezvous assigns
them, so hosts may run different counts.
"""

from __future__ import annotations

import datetime
import secrets
from collections.abc import Mapping, Sequence

from clusterlaunch.core import accelerators, commands, envpolicy, limits, torchrunargs
from clusterlaunch.core.errors import HostsFileError, UsageError
from clusterlaunch.core.hostnames import master_address_problem, shown
from clusterlaunch.core.model import (
    LOCALHOST,
    HostSpec,
    Inventory,
    JobPlan,
    LaunchOptions,
    NodePlan,
    SshTarget,
)
from clusterlaunch.core.setupguard import SetupGuard
from clusterlaunch.core.torchrunargs import parse_torchrun_args

JOB_ID_VAR = "CLUSTERLAUNCH_JOB_ID"
LOCAL_ADDR = "127.0.0.1"
DEFAULT_PYTHON = "python3"


def python_for(spec: HostSpec, override: str | None, local_python: str | None) -> str:
    """``--python``, else the hosts file's, else the controller's own (``localhost``), else python3.

    A local job naturally uses the interpreter clusterlaunch itself runs in
    (the one that has torch), even from a virtual environment that is not
    activated.
    """
    if override:
        return override
    if spec.python:
        return spec.python
    if spec.is_local and local_python:
        return local_python
    return DEFAULT_PYTHON


def new_job_id(now: datetime.datetime | None = None) -> str:
    """A job id that sorts by start time and cannot be guessed.

    Shaped ``cl-YYYYmmdd-HHMMSS-xxxxxx``.
    """
    moment = now or datetime.datetime.now()
    return f"cl-{moment:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def parse_env_assignments(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``--env KEY=VALUE`` words → pairs, with a clear error for each bad one, which
    never shows a value (a word without ``=`` may be one: ``--env $TOKEN``)."""
    result = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(
                "--env: expected KEY=VALUE, e.g. --env NCCL_DEBUG=INFO; got a word without '=' "
                "(not shown: it may be a value)"
            )
        why = envpolicy.refusal(name)
        if why is not None:
            raise UsageError(f"{envpolicy.env_flag(name)}: {why}")
        result.append((name, value))
    return tuple(result)


def choose_master_addr(
    inventory: Inventory, targets: Sequence[SshTarget], torchrun: bool = True
) -> str:
    """The address every node dials: explicit, else node 0's ``addr``, else its HostName.

    Only a torchrun job has a master: ``exec`` (not ``torchrun``) dials none, so a
    ``localhost`` node 0 of several hosts is fine there.
    """
    if inventory.master_addr:
        return inventory.master_addr  # checked as it was read (master_address_problem)
    first = inventory.hosts[0]
    if first.is_local and not first.addr:
        if len(inventory.hosts) > 1 and torchrun:
            raise _localhost_master(inventory, first)
        return LOCAL_ADDR
    addr = first.addr or targets[0].hostname
    problem = master_address_problem(addr, "master_addr: (or --master-addr)") if torchrun else None
    if problem is not None:
        field = "" if inventory.mpi else "hosts[0].addr" if first.addr else "hosts[0].host"
        whose = "" if first.addr or addr == first.host else " (its HostName in your SSH config)"
        raise HostsFileError(
            inventory.path, first.line, field, f"node 0's address {shown(addr)}{whose} {problem}"
        )
    return addr


def _localhost_master(inventory: Inventory, first: HostSpec) -> HostsFileError:
    """The fix in the file's own terms (a hostfile line holds no ``addr:``), and what made
    the entry node 0 when it is not the file's first (``--exclude``, a restart)."""
    problem = "localhost cannot be the master of a multi-host job; "
    if inventory.node0_moved:
        problem = f"localhost is node 0, the master, as {inventory.node0_moved}, and {problem}"
    reach = "an address the other hosts can reach"
    if inventory.mpi:
        fix = f"pass --master-addr (or use a YAML hosts file with addr:) with {reach}"
        return HostsFileError(inventory.path, first.line, "", problem + fix)
    fix = f"set its addr: (or master_addr:, or --master-addr) to {reach}"
    where = "hosts" if first.entry is None else f"hosts[{first.entry}]"
    return HostsFileError(inventory.path, first.line, where, problem + fix)


def node_addr(spec: HostSpec, target: SshTarget) -> str:
    """The address peers use for a node."""
    if spec.addr:
        return spec.addr
    return LOCAL_ADDR if spec.is_local else target.hostname


def master_port_of(inventory: Inventory, options: LaunchOptions) -> int | None:
    """Command line beats hosts file; ``None`` means auto."""
    if options.master_port_auto:
        return None
    if options.master_port is not None:
        return options.master_port
    return inventory.master_port


def forwarded_env(options: LaunchOptions, local_env: Mapping[str, str]) -> dict[str, str]:
    """``--forward-env``'s variables, checked sendable.

    The same for every host, so the planner finds them once: per host, 256 hosts
    matched the controller's ~35 variables 8,704 times (~0.07 s).
    """
    forwarded = envpolicy.forwarded(options.forward_env, local_env)
    for name, value in forwarded.items():
        # Local variables may hold bytes that are not UTF-8; hosts receive text.
        limits.sendable_value(f"--forward-env: ${name}", value)
    return forwarded


def node_env(
    spec: HostSpec,
    options: LaunchOptions,
    job_id: str,
    forwarded: Mapping[str, str],
    *,
    devices: bool = True,
) -> dict[str, str]:
    """defaults → host → ``--forward-env`` (:func:`forwarded_env`) → ``--env``, then ours
    (``devices``: with the host's ``devices:`` in its accelerator's variable)."""
    own = {JOB_ID_VAR: job_id}
    if spec.devices is not None and devices:
        own[accelerators.visible_var(spec.accelerator)] = accelerators.devices_value(spec.devices)
    return envpolicy.merge(spec.env, forwarded, dict(options.env), own)


def plan_job(
    inventory: Inventory,
    targets: Sequence[SshTarget],
    options: LaunchOptions,
    *,
    job_id: str,
    local_env: Mapping[str, str],
    local_cwd: str,
    agent_size: int,
    exec_argv: Sequence[str] | None = None,
    local_python: str | None = None,
) -> JobPlan:
    """Plan a torchrun job (or, with ``exec_argv``, a plain command) on every host.

    ``targets`` are the SSH resolutions of ``inventory.hosts``, in the same order.
    ``agent_size`` is the byte length of the agent program the bootstrap reads;
    ``local_python`` is the controller's interpreter (default for ``localhost``).
    """
    if len(targets) != len(inventory.hosts):
        raise ValueError("one target per host expected")
    if not options.workdir and any(not spec.workdir for spec in inventory.hosts):
        # The default workdir is this directory's path, sent to the hosts as text.
        limits.sendable("this directory's path (the default workdir; or pass --workdir)", local_cwd)
    master_addr = choose_master_addr(inventory, targets, torchrun=exec_argv is None)
    master_port = master_port_of(inventory, options)
    run_id = None if torchrunargs.sets_run_id(options.torchrun_args) else job_id
    forwarded = forwarded_env(options, local_env)
    nodes = []
    first_rank: int | None = 0
    for node_rank, (spec, target) in enumerate(zip(inventory.hosts, targets, strict=True)):
        python = commands.HostPath(python_for(spec, options.python, local_python))
        workdir = commands.HostPath(options.workdir or spec.workdir or local_cwd)
        if exec_argv is None:
            job_argv = commands.torchrun_argv(
                commands.TorchrunSpec(
                    python=python,
                    nnodes=len(inventory.hosts),
                    nproc=spec.gpus,
                    node_rank=node_rank,
                    master_addr=master_addr,
                    master_port=master_port,
                    log_dir=commands.AUTO,  # the host's agent makes it: claims.py
                    extra_args=options.torchrun_args,
                    script=options.script,
                    script_args=options.script_args,
                    run_id=run_id,
                    script_kind=options.script_kind,
                )
            )
        else:
            job_argv = list(exec_argv)
        on_host = accelerators.left_to_host(spec, exec_argv)
        env = node_env(spec, options, job_id, forwarded, devices=on_host is None)
        agent_argv = _agent_argv(
            python, agent_size, job_id, node_rank, first_rank, options, exec_argv is None
        )
        # The job's node count, which its record keeps: kill lists every node, found or not.
        agent_argv += ["--nodes", str(len(inventory.hosts))]  # (exec's command does not say)
        if on_host is not None:
            agent_argv += ["--devices", on_host]
        guard = SetupGuard(options.setup_timeout)
        nodes.append(
            NodePlan(
                node_rank=node_rank,
                host=spec.host,
                target=target,
                addr=node_addr(spec, target),
                nproc=spec.gpus,
                first_rank=first_rank,
                env=env,
                workdir=workdir,
                python=python,
                setup=spec.setup,
                argv=tuple(job_argv),
                command=commands.agent_command(
                    workdir, spec.setup, env, agent_argv, job_argv, guard
                ),
                agent_argv=tuple(agent_argv),
                setup_guard=guard,
                devices=spec.devices,
                accelerator=spec.accelerator,
            )
        )
        first_rank = None if first_rank is None or spec.gpus is None else first_rank + spec.gpus
    counts = [spec.gpus for spec in inventory.hosts]
    return JobPlan(
        job_id=job_id,
        world_size=None if None in counts else sum(c or 0 for c in counts),
        master_addr=master_addr,
        master_port=master_port,
        nodes=tuple(nodes),
        notes=inventory.notes,
    )


def _agent_argv(
    python: str,
    agent_size: int,
    job_id: str,
    node_rank: int,
    first_rank: int | None,
    options: LaunchOptions,
    torchrun: bool,
) -> list[str]:
    argv = [
        *commands.bootstrap_argv(python, "agent", agent_size, site=False),
        "--job-id",
        job_id,
        "--node-rank",
        str(node_rank),
        "--grace",
        _number(options.grace),
        "--heartbeat-timeout",
        _number(options.heartbeat_timeout),
    ]
    if torchrun:
        first = commands.AUTO if first_rank is None else str(first_rank)
        argv += ["--first-rank", first, "--rank-files"]
    return argv


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


__all__ = [
    "JOB_ID_VAR",
    "LOCALHOST",
    "choose_master_addr",
    "new_job_id",
    "parse_env_assignments",
    "parse_torchrun_args",
    "plan_job",
]
