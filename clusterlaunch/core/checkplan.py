"""The preflight's commands: the probe (``check``) and the checking agent (``run``).

Pure, like the planner: the argv of each, under exactly the job's shell prefix
(quoted by :mod:`clusterlaunch.core.commands`). The nonce is the preflight's
own, so each preflight (each attempt of a job) has fresh ones.
"""

from __future__ import annotations

from clusterlaunch.core import commands, defaults
from clusterlaunch.core.model import NodePlan, ScriptKind
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
    options = _check_options(node, master_addr, listen_port, nonce, script, True, script_kind)
    agent = [*node.agent_argv, *options, "--preflight-timeout", f"{timeout:g}"]
    return commands.agent_command(
        node.workdir, node.setup, node.env, agent, node.argv, node.setup_guard
    )


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
