"""``--sync``: copy this directory to every host's workdir before anything starts.

The source was scanned and checked before any connection
(:mod:`clusterlaunch.controller.syncscan`). Then, in order: every host creates
its destination and leaves a token file in it; every host lists the tokens its
destination holds, so hosts that share one directory (one machine, a shared
file system, or this very directory) are copied to once and never by two
writers at a time; then each directory is copied, with rsync where both ends
have it, over SFTP otherwise, and with a plain copy for ``localhost``. Any
failure raises :class:`SyncError` naming every failed host, before the
launcher starts anything anywhere.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Mapping

from clusterlaunch.controller.batch import Batch, Finished, run_all
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.synccopy import Copier
from clusterlaunch.core import commands, render
from clusterlaunch.core.defaults import FANOUT
from clusterlaunch.core.errors import HostProblem, SyncError
from clusterlaunch.core.model import JobPlan, NodePlan
from clusterlaunch.core.syncplan import HostCheck, SyncTask, Transfer, plan_tasks, report_line
from clusterlaunch.core.syncsource import TOKEN_PREFIX, SourceTree
from clusterlaunch.transport import Connection, SshSettings
from clusterlaunch.transport.fanout import Failed, run_parallel

CHECK_TIMEOUT = 30.0
"""Seconds for each quick round of commands (create the destination, list tokens)."""
MAX_PARALLEL = 16
"""Copies at once: the controller's uplink, not the hosts, is the limit."""


def sync_workdirs(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    tree: SourceTree,
    ssh: SshSettings,
    console: Console,
    fanout: int = FANOUT,
    copied_to: Callable[[str], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> None:
    """Copy ``tree`` to every node's workdir; raise SyncError if any copy failed.

    The quick rounds of commands open ``fanout`` channels at once; the copies
    run at most :data:`MAX_PARALLEL` at once. ``copied_to`` hears of each host
    whose copy has ended (from the copying threads); ``say`` takes the report
    lines (default: the console's stderr).
    """
    nodes = {node.node_rank: node for node in plan.nodes}
    checks, source_token, cleanup = _find_shared_dirs(plan, connections, tree.root, fanout)
    local_rsync = shutil.which("rsync") is not None and shutil.which("ssh") is not None
    tasks = plan_tasks(checks, source_token, local_rsync)
    copier = Copier(tree, connections, ssh)

    def copy(task: SyncTask) -> tuple[Transfer, float, str | None]:
        result = copier.run(nodes[task.node_ranks[0]], task)
        if copied_to is not None:
            for rank in task.node_ranks:
                copied_to(nodes[rank].host)
        return result

    try:
        try:
            copied = run_parallel(copy, tasks, min(fanout, MAX_PARALLEL), "sync")
        except BaseException:  # Ctrl-C, SIGTERM: stop rsync and SFTP, then re-raise
            copier.cancel()
            raise
    finally:
        cleanup.wait(CHECK_TIMEOUT)  # ran alongside the copies; they never look at tokens
    results = []
    for task, result in zip(tasks, copied, strict=True):
        if isinstance(result, Failed):
            raise result.error  # a bug: host failures come back as results
        results.append((task, result))
    problems = []
    for task, (transfer, seconds, error) in results:
        hosts = [nodes[rank].host for rank in task.node_ranks]
        if error is None:
            line = report_line(
                hosts, nodes[task.node_ranks[0]].workdir, task.method, transfer, seconds
            )
            (say or console.say)(f"clusterlaunch: {line}")
        else:
            problems.append(HostProblem(",".join(hosts), f"sync ({task.method})", error))
    console.err.flush()
    if problems:
        raise SyncError(problems, render.problems_text(problems))


def _find_shared_dirs(
    plan: JobPlan, connections: Mapping[str, Connection], source: str, fanout: int
) -> tuple[list[HostCheck], str | None, Batch[int]]:
    """Create every destination, and tell which nodes (and the source) share one.

    Also returns the started, not yet awaited, removal of the hosts' tokens.
    """
    prefix = f"{TOKEN_PREFIX}{secrets.token_hex(6)}-"
    tokens = {node.node_rank: f"{prefix}{node.node_rank}" for node in plan.nodes}
    source_token = _leave_token(source, prefix + "source")
    # Until the first round answers, any host may hold a token: remove them all.
    placed = list(plan.nodes)

    def remove_tokens() -> Batch[int]:
        return Batch(
            {
                node.node_rank: (
                    connections[node.host],
                    commands.sync_cleanup_command(node.workdir, tokens[node.node_rank]),
                )
                for node in placed
            },
            fanout=fanout,
        )

    try:
        prepared = _round(
            plan,
            connections,
            lambda n: commands.sync_prepare_command(n.workdir, tokens[n.node_rank]),
            fanout,
        )
        placed = [node for node in plan.nodes if prepared[node.node_rank].status == 0]
        _raise_failures(plan, prepared, "cannot create the workdir")
        listed = _round(
            plan, connections, lambda n: commands.sync_tokens_command(n.workdir, prefix), fanout
        )
        _raise_failures(plan, listed, "cannot list the workdir")
    except BaseException:
        remove_tokens().wait(CHECK_TIMEOUT)
        raise
    finally:
        if source_token is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(source, source_token))
    known = {*tokens.values(), *([source_token] if source_token else [])}
    checks = [
        HostCheck(
            node_rank=node.node_rank,
            host=node.host,
            local=node.target.is_local,
            rsync=any(_fields(prepared[node.node_rank].out, "rsync")),
            seen=frozenset(set(_fields(listed[node.node_rank].out, "token")) & known),
        )
        for node in plan.nodes
    ]
    return checks, source_token, remove_tokens()


def _leave_token(directory: str, name: str) -> str | None:
    """Create token ``name`` in ``directory``; None where it cannot be written."""
    try:
        with open(os.path.join(directory, name), "x"):
            pass
    except OSError:
        return None  # a read-only source: then no host can be recognised as it
    return name


def _round(
    plan: JobPlan,
    connections: Mapping[str, Connection],
    command: Callable[[NodePlan], str],
    fanout: int,
) -> dict[int, Finished]:
    """Run ``command(node)`` on every node at once."""
    jobs = {node.node_rank: (connections[node.host], command(node)) for node in plan.nodes}
    return run_all(jobs, CHECK_TIMEOUT, fanout)


def _fields(out: bytes, name: str) -> list[str]:
    """The values of ``name=value`` lines (anything else a login script printed is ignored)."""
    mark = name.encode() + b"="
    return [
        line[len(mark) :].decode("utf-8", "surrogateescape")
        for line in out.split(b"\n")
        if line.startswith(mark)
    ]


def _raise_failures(plan: JobPlan, results: Mapping[int, Finished], what: str) -> None:
    problems = []
    for node in plan.nodes:
        result = results[node.node_rank]
        if result.status != 0:
            detail = result.error or render.last_lines(result.err, 2) or f"exit {result.status}"
            problems.append(HostProblem(node.host, "sync", f"{what} {node.workdir}: {detail}"))
    if problems:
        raise SyncError(problems, render.problems_text(problems))
