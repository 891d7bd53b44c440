"""From parsed flags to a request: everything checked before any file is read or host contacted.

The parser itself is :mod:`clusterlaunch.cli.parser`; :mod:`clusterlaunch.cli.main`
runs the request and maps errors to exit statuses. Bad input raises
``UsageError``.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from clusterlaunch.cli import slurm as slurmargs
from clusterlaunch.controller.launcher import JobRequest
from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.lines import parse_rank_filter
from clusterlaunch.core.model import DEFAULT_SETUP_TIMEOUT, JobPlan, LaunchOptions
from clusterlaunch.core.planner import new_job_id, parse_env_assignments
from clusterlaunch.core.torchrunargs import parse_torchrun_args
from clusterlaunch.transport import SshSettings

_ASCII_NUMBER = re.compile(r"[0-9]+")
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_RUNS_NO_SCRIPT_FILE = ("--no-python", "--no_python", "-m", "--module")
# Text flags, by argparse dest: sent to the hosts (must be UTF-8) or used here only.
_SENT_TEXT = {"python": "--python", "workdir": "--workdir", "script": "SCRIPT"}
_LOCAL_TEXT = {"hosts": "HOSTS", "ssh_config": "--ssh-config", "log_dir": "--log-dir"}


def check_words(args: argparse.Namespace) -> None:
    """What every command checks in its text flags, before reading any file.

    Blank values are refused (``--workdir ''`` silently meant the default);
    words sent to the hosts must be UTF-8 (non-UTF-8 bytes in argv arrive as
    surrogate escapes and failed to encode after the preflight).
    """
    for dest, flag in (*_SENT_TEXT.items(), *_LOCAL_TEXT.items()):
        value = getattr(args, dest, None)
        if value is not None:
            limits.text(flag, value, sent=dest in _SENT_TEXT)
    for pattern in getattr(args, "forward_env", ()):
        limits.text("--forward-env", pattern, sent=False)
    for pair in getattr(args, "env", ()):
        limits.sendable("--env", pair)
    limits.sendable("--torchrun-args", getattr(args, "torchrun_args", "") or "")
    words = "COMMAND" if args.command == "exec" else "SCRIPT_ARGS"
    for word in getattr(args, "passthrough", ()):
        limits.sendable(words, word)
    job_id = getattr(args, "job_id", None)
    if job_id is not None and not _JOB_ID.fullmatch(job_id):
        flag = "JOB_ID" if args.command == "kill" else "--job-id"
        raise UsageError(
            f"{flag} {limits.shown(job_id)}: use 1-64 letters, digits, '.', '_' or '-'"
        )


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The job-shaping flags, validated."""
    port_text = getattr(args, "master_port", None)
    port_auto = port_text == "auto"
    port = None
    if port_text is not None and not port_auto:
        if not _ASCII_NUMBER.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise UsageError(f"--master-port {port_text}: use auto or a TCP port 1-65535")
        port = int(port_text)
    if args.python is not None and ("=" in args.python or "\n" in args.python):
        raise UsageError(f"--python {args.python!r}: must be a path without '=' or newlines")
    if getattr(args, "json", False) and not getattr(args, "dry_run", False):
        raise UsageError("--json goes with --dry-run (a running job prints its ranks' output)")
    return LaunchOptions(
        script=getattr(args, "script", None) or "",
        script_args=tuple(getattr(args, "passthrough", ()) if args.command == "run" else ()),
        env=parse_env_assignments(args.env),
        forward_env=tuple(args.forward_env),
        master_port=port,
        master_port_auto=port_auto,
        python=args.python,
        workdir=args.workdir,
        torchrun_args=parse_torchrun_args(getattr(args, "torchrun_args", "") or ""),
        grace=getattr(args, "grace", 5.0),
        heartbeat_timeout=getattr(args, "heartbeat_timeout", 15.0),
        setup_timeout=getattr(args, "setup_timeout", DEFAULT_SETUP_TIMEOUT),
    )


def job_request(args: argparse.Namespace) -> JobRequest:
    """Everything ``run``/``exec``/``check`` need, from the flags and the hosts."""
    options = launch_options(args)
    inventory, targets, transport = slurmargs.hosts(args)
    rank_filter = None
    if getattr(args, "ranks", None) is not None:  # --ranks '' too: it names no rank
        world = sum(spec.gpus for spec in inventory.hosts)
        try:
            rank_filter = parse_rank_filter(args.ranks, world)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return JobRequest(
        inventory=inventory,
        targets=targets,
        options=options,
        job_id=getattr(args, "job_id", None) or new_job_id(),
        ssh=ssh_settings(args),
        exec_argv=exec_argv(args) if args.command == "exec" else None,
        fanout=args.fanout,
        timeout=getattr(args, "timeout", None),
        rank_filter=rank_filter,
        log_dir=getattr(args, "log_dir", None),
        transport=transport,
        fail_fast=getattr(args, "fail_fast", False),
        sync=getattr(args, "sync", False),
    )


def ssh_settings(args: argparse.Namespace) -> SshSettings:
    """Connection flags shared by every command."""
    return SshSettings(
        host_key_policy=args.host_key_policy,
        connect_timeout=args.connect_timeout,
        config_path=args.ssh_config,
        client=args.ssh_client,
    )


def exec_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """The command ``exec`` runs on every host."""
    argv = tuple(args.passthrough)
    if not argv or not argv[0].strip():
        raise UsageError(
            "exec: give a command after --, e.g. clusterlaunch exec hosts.yaml -- hostname"
        )
    return argv


def check_local_script(
    plan: JobPlan, options: LaunchOptions, synced: bool = False, cwd: str | None = None
) -> None:
    """Catch a mistyped script before contacting anything, when we can tell locally.

    Only when the hosts run the script from this very directory's contents:
    every workdir is this directory (the default), or ``--sync`` copies it
    there; and only for a file torchrun opens, not ``--no-python``/``-m``.
    """
    here = os.path.realpath(cwd or os.getcwd())
    same_dir = synced or all(os.path.realpath(node.workdir) == here for node in plan.nodes)
    by_file = not any(word in _RUNS_NO_SCRIPT_FILE for word in options.torchrun_args)
    if same_dir and by_file and not (Path(here) / options.script).is_file():
        raise UsageError(
            f"{options.script}: no such script here (the hosts run it from this directory)"
        )
