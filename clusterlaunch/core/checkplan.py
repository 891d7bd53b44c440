"""The preflight's commands: the probe (``check``) and the checking agent (``run``).

Pure, like the planner: the argv of each, under exactly the job's shell prefix
(quoted by :mod:`clusterlaunch.core.commands`). The nonce is the preflight's
own, so each preflight (each attempt of a job) has fresh ones. And the check
that each fits on a host's command line, made before any host is contacted.
"""

from __future__ import annotations

from clusterlaunch.core import commands, defaults, limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import JobPlan, NodePlan, ScriptKind
from clusterlaunch.core.planner import remote_log_dir
from clusterlaunch.core.setupguard import SetupGuard

_SCRIPT_FLAG = {"file": "--script", "module": "--module", "program": "--program"}


def probe_command(
    node: NodePlan,
    master_addr: str,
    listen_port: int | None,
    nonce: str,
    script: str | None,
    need_torch: bool,
    probe_size: int,
    setup_timeout: float,
    job_id: str | None = None,
    script_kind: ScriptKind = "file",
) -> str:
    """The preflight probe for ``node`` (``check``), under exactly the job's shell prefix.

    ``listen_port`` is given for node 0 only (``0`` = choose a free port);
    ``job_id`` for torchrun jobs (is one of that id running, its temp dir taken?).
    """
    argv = commands.bootstrap_argv(node.python, "probe", probe_size)
    argv += _check_options(node, master_addr, listen_port, nonce, script, need_torch, script_kind)
    if job_id is not None:
        argv += ["--job-id", job_id, "--tail-dir", remote_log_dir(job_id, node.node_rank)]
    guard = SetupGuard(setup_timeout)
    return commands.shell_command(node.workdir, node.setup, node.env, argv, guard)


def checking_agent_command(
    node: NodePlan,
    master_addr: str,
    listen_port: int | None,
    nonce: str,
    script: str | None,
    timeout: float,
    script_kind: ScriptKind = "file",
) -> str:
    """``node``'s agent for ``run``: it makes the probe's checks, then waits up to
    ``timeout`` s for the go (remote/gate.py). Its job id is in its own options."""
    options = _agent_options(node, master_addr, listen_port, nonce, script, timeout, script_kind)
    agent = [*node.agent_argv, *options]
    return commands.agent_command(
        node.workdir, node.setup, node.env, agent, node.argv, node.setup_guard
    )


def _agent_options(
    node: NodePlan,
    master_addr: str,
    listen_port: int | None,
    nonce: str,
    script: str | None,
    timeout: float,
    script_kind: ScriptKind,
) -> list[str]:
    """The checking agent's options after the job's own agent options."""
    options = _check_options(node, master_addr, listen_port, nonce, script, True, script_kind)
    return [*options, "--preflight-timeout", f"{timeout:g}"]


def _check_options(
    node: NodePlan,
    master_addr: str,
    listen_port: int | None,
    nonce: str,
    script: str | None,
    need_torch: bool,
    script_kind: ScriptKind,
) -> list[str]:
    """The preflight's options, the probe's and the agent's alike."""
    argv = ["--master-addr", master_addr, "--nonce", nonce]
    argv += ["--timeout", f"{defaults.PROBE_DIAL_TIMEOUT_S:g}"]
    if listen_port is not None:
        argv += ["--listen", str(listen_port)]
    if script:
        argv += [_SCRIPT_FLAG[script_kind], script]
    if node.accelerator:
        argv += ["--accelerator", node.accelerator]
    if need_torch:
        argv.append("--need-torch")
    return argv


# The longest value each preflight word can take, for the size check: a nonce is
# secrets.token_hex(8); a timeout's "%g" text is at most "1.23457e+300" long.
_LONGEST_NONCE = "0" * 16
_LONGEST_PORT = 65535
_LONGEST_TIMEOUT = 1.23457e300


def check_command_sizes(
    plan: JobPlan, script: str | None, script_kind: ScriptKind, preflight: bool, reserve: int = 0
) -> None:
    """Refuse a plan whose command would not fit a host's command line (UsageError).

    ``preflight``: the hosts get the checking agent (``run``; ``check``'s probe is
    shorter), not ``node.command`` (``exec``); its preflight words are counted at
    their longest (up to 15 bytes more than will be sent). ``reserve``: bytes a later
    attempt may add (the restart count's digits). The command carries the job's
    arguments and environment as they are: large data belongs in a file.
    """
    for node in plan.nodes:
        size = command_size(node, plan.master_addr, script, script_kind, preflight) + reserve
        if size > limits.MAX_COMMAND_BYTES:
            raise UsageError(_too_long(node, size))


def command_size(
    node: NodePlan, master_addr: str, script: str | None, script_kind: ScriptKind, preflight: bool
) -> int:
    """The bytes of ``node``'s command, with the checking agent's options at their longest.

    Those options are words inserted into ``node.command``, so they are measured
    alone: 14 ms for 4,096 hosts here, where building each host's whole command
    again took 52 (planning them: 86).
    """
    size = len(node.command.encode("utf-8", "surrogateescape"))
    if not preflight:
        return size
    listen = _LONGEST_PORT if node.node_rank == 0 else None
    options = _agent_options(
        node, master_addr, listen, _LONGEST_NONCE, script, _LONGEST_TIMEOUT, script_kind
    )
    return size + 1 + len(commands.quote_argv(options).encode("utf-8", "surrogateescape"))


def _too_long(node: NodePlan, size: int) -> str:
    words = len(commands.quote_argv(node.argv).encode("utf-8", "surrogateescape"))
    assignments = (f"{name}={value}" for name, value in node.env.items())
    env = len(commands.quote_argv(assignments).encode("utf-8", "surrogateescape"))
    return (
        f"{node.host}: its command line would be up to {size:,} bytes, and a host takes "
        f"{limits.MAX_COMMAND_BYTES:,} (Linux's limit on one argument); the job's arguments "
        f"are {words:,} bytes of it, its environment {env:,}: pass large data in a file "
        "(its path as the argument, --sync to copy it), not in arguments or --env values"
    )
