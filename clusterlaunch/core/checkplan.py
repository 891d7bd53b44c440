"""The preflight's commands: the probe (``check``) and the checking agent (``run``).

Pure, like the planner: the argv of each, under exactly the job's shell prefix
(quoted by :mod:`clusterlaunch.core.commands`). The nonce is the preflight's
own, so each preflight (each attempt of a job) has fresh ones. And the check
that each fits on a host's command line, made before any host is contacted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from clusterlaunch.core import commands, defaults, envhandoff, limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import JobPlan, NodePlan, ScriptKind
from clusterlaunch.core.setupguard import OVERDUE_S, SetupGuard

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
    ``job_id`` for torchrun jobs (does a job of that id hold the host already?).
    """
    argv = commands.bootstrap_argv(node.python, "probe", probe_size, site=False)
    argv += _check_options(node, master_addr, listen_port, nonce, script, need_torch, script_kind)
    if job_id is not None:
        argv += ["--job-id", job_id, "--node-rank", str(node.node_rank)]
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
    options = _check_options(
        node, master_addr, listen_port, nonce, script, True, script_kind, preflight_timeout=timeout
    )
    return commands.agent_command(
        node.workdir,
        node.setup,
        node.env,
        [*node.agent_argv, *options],
        node.argv,
        node.setup_guard,
    )


def preflight_bound(
    plan: JobPlan,
    setup_timeout: float,
    timeout: float = defaults.PREFLIGHT_TIMEOUT_S,
    limit: float | None = None,
) -> float:
    """The preflight's bound in seconds: setups count too; ``limit``: what ``--timeout``
    left a restart."""
    if any(node.setup for node in plan.nodes):
        timeout += setup_timeout + OVERDUE_S
    return timeout if limit is None else max(0.0, min(timeout, limit))


def go_wait(bound: float) -> float:
    """How long a ``run`` agent waits for its go (``--preflight-timeout``), the preflight
    taking up to ``bound`` seconds."""
    return bound + defaults.GO_SLACK_S


def listen_port(plan: JobPlan, node: NodePlan) -> int | None:
    """What node 0 binds in its preflight (``--listen``; ``0``: a free port, for ``auto``)."""
    return (plan.master_port or 0) if node.node_rank == 0 else None


def agents_as_run(
    plan: JobPlan, script: str, script_kind: ScriptKind, setup_timeout: float
) -> JobPlan:
    """``plan`` with each node's command as ``run`` sends it (``--dry-run``): its agent with
    the preflight's options, word for word, but the nonce, drawn afresh by each preflight
    and shown as ``AUTO``. A restart's agents wait less for their go under ``--timeout``."""
    wait = go_wait(preflight_bound(plan, setup_timeout))
    nodes = tuple(
        replace(
            node,
            command=checking_agent_command(
                node,
                plan.master_addr,
                listen_port(plan, node),
                commands.AUTO,
                script,
                wait,
                script_kind,
            ),
        )
        for node in plan.nodes
    )
    return replace(plan, nodes=nodes)


def _check_options(
    node: NodePlan,
    master_addr: str,
    listen_port: int | None,
    nonce: str,
    script: str | None,
    need_torch: bool,
    script_kind: ScriptKind,
    preflight_timeout: float | None = None,
) -> list[str]:
    """The preflight's options, the probe's and the agent's alike; the agent's (for
    ``run``) also say how long it waits for the go (``preflight_timeout``)."""
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
    if preflight_timeout is not None:
        argv += ["--preflight-timeout", f"{preflight_timeout:g}"]
    return argv


# The longest value each preflight word can take, for the size check: a nonce is
# secrets.token_hex(8); a timeout's "%g" text is at most "1.23457e+300" long.
_LONGEST_NONCE = "0" * 16
_LONGEST_PORT = 65535
_LONGEST_TIMEOUT = 1.23457e300
_POINTER = 8  # each word's pointer in execve's argv or envp, as ARG_MAX counts it


def check_command_sizes(
    plan: JobPlan, script: str | None, script_kind: ScriptKind, preflight: bool, reserve: int = 0
) -> None:
    """Refuse a plan whose words would not fit a host's ``exec`` (UsageError).

    One word past :data:`~clusterlaunch.core.limits.MAX_ARG_BYTES`, or all past
    :data:`~clusterlaunch.core.limits.MAX_EXEC_BYTES`, failed on the hosts
    ("Argument list too long") after they were contacted. ``preflight``: the hosts
    get the checking agent (``run``; ``check``'s probe is shorter), its preflight
    words at their longest. ``reserve``: bytes a later attempt may add (the
    restart count's digits).
    """
    for node in plan.nodes:
        words = exec_words(node, plan.master_addr, script, script_kind, preflight)
        check_exec_words(node.host, node.env, words, reserve)


def check_exec_words(
    host: str, env: Mapping[str, str], words: Sequence[str], reserve: int = 0
) -> None:
    """Refuse ``env`` and ``words`` (UsageError) if they would not fit ``host``'s ``exec``.

    Also for ``ps``, ``kill`` and ``stacks``, whose jobctl command carries each host's
    ``env:`` (a few hundred bytes of words more: half of ARG_MAX is kept for the host).
    Counted for ``/bin/sh``'s exec, which takes each variable as ``__cl_NAME=VALUE``
    (:mod:`clusterlaunch.core.envhandoff`), the larger one.
    """
    argv, held = envhandoff.exec_strings(env, words)
    for name, word in zip(env, held, strict=True):
        if _size(word) > limits.MAX_ARG_BYTES:
            raise UsageError(_variable_too_long(host, name, _size(word) - len(envhandoff.HELD)))
    if env and _size(argv[2]) > limits.MAX_ARG_BYTES:  # /bin/sh's script: the names only
        raise UsageError(_names_too_long(host, len(env), argv[2]))
    longest = max(argv, key=_size, default="")
    if _size(longest) > limits.MAX_ARG_BYTES:
        raise UsageError(_word_too_long(host, longest))
    total = sum(_size(word) + 1 + _POINTER for word in [*argv, *held]) + reserve
    if total > limits.MAX_EXEC_BYTES:
        env_size = sum(_size(word) + 1 + _POINTER for word in held)
        raise UsageError(_too_much(host, total, env_size))


def exec_words(
    node: NodePlan, master_addr: str, script: str | None, script_kind: ScriptKind, preflight: bool
) -> list[str]:
    """The words ``node``'s shell hands ``exec`` but the environment's: the agent's and the
    job's, with the checking agent's options at their longest (``preflight``)."""
    agent = list(node.agent_argv)
    if preflight:
        listen = _LONGEST_PORT if node.node_rank == 0 else None
        agent += _check_options(
            node, master_addr, listen, _LONGEST_NONCE, script, True, script_kind, _LONGEST_TIMEOUT
        )
    return [*agent, "--", *node.argv]


def _size(word: str) -> int:
    return len(word.encode("utf-8", "surrogateescape"))


_IN_A_FILE = "pass large data in a file (its path instead, --sync to copy it)"


def _word_too_long(host: str, word: str) -> str:
    return (
        f"{host}: an argument ({limits.shown(word[:12])}...) is {_size(word):,} bytes, and a "
        f"host takes {limits.MAX_ARG_BYTES:,} in one argument (Linux's MAX_ARG_STRLEN): "
        + _IN_A_FILE
    )


def _names_too_long(host: str, count: int, script: str) -> str:
    return (
        f"{host}: the names of the job's {count:,} variables take {_size(script):,} bytes in "
        f"the line that sets them, and a host takes {limits.MAX_ARG_BYTES:,} in one argument "
        "(Linux's MAX_ARG_STRLEN): set fewer variables"
    )


def _variable_too_long(host: str, name: str, size: int) -> str:
    most = limits.MAX_ARG_BYTES - len(envhandoff.HELD)
    return (
        f"{host}: {name}=... (name and value) is {size:,} bytes, and a host takes {most:,} in "
        f"one variable (Linux's MAX_ARG_STRLEN, less {len(envhandoff.HELD)} bytes: each "
        f"variable reaches the host as {envhandoff.HELD}NAME=VALUE first): " + _IN_A_FILE
    )


def _too_much(host: str, total: int, env: int) -> str:
    return (
        f"{host}: the job's arguments and environment take {total:,} bytes "
        f"({env:,} of them the environment), and clusterlaunch allows {limits.MAX_EXEC_BYTES:,}"
        " (half of Linux's usual ARG_MAX; the host's own environment needs the rest): " + _IN_A_FILE
    )
