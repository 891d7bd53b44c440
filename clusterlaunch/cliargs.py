"""Command-line parsing: the parser, the pass-through split, and flags → request.

Everything here is about reading what the user typed; :mod:`clusterlaunch.cli`
runs it and maps errors to exit statuses. Bad input raises ``UsageError``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import clusterlaunch
from clusterlaunch import sandboxargs, slurmargs
from clusterlaunch.errors import UsageError
from clusterlaunch.launcher import JobRequest
from clusterlaunch.logs import parse_rank_filter
from clusterlaunch.model import DEFAULT_SETUP_TIMEOUT, JobPlan, LaunchOptions
from clusterlaunch.planner import new_job_id, parse_env_assignments, parse_torchrun_args
from clusterlaunch.setupguard import checked_timeout
from clusterlaunch.transport import POLICIES, SshSettings

_ASCII_NUMBER = re.compile(r"[0-9]+")
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
# How many positionals come before the words passed through untouched.
_PASSTHROUGH_AFTER = {"run": 2, "exec": 1}
_RUNS_NO_SCRIPT_FILE = ("--no-python", "--no_python", "-m", "--module")


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``clusterlaunch`` argument parser."""
    summary = (clusterlaunch.__doc__ or "").strip().split("\n")[0]
    parser = Parser(prog="clusterlaunch", description=summary)
    parser.add_argument(
        "--version", action="version", version=f"clusterlaunch {clusterlaunch.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_run(commands.add_parser("run", help="run a torchrun job on every host"))
    _add_exec(commands.add_parser("exec", help="run a command on every host"))
    _add_check(commands.add_parser("check", help="run the preflight checks only"))
    _add_job_control(commands)
    sandboxargs.add_parser(commands, Parser)  # sandbox up|down: see clusterlaunch/sandbox.py
    return parser


def _add_job_command_options(parser: argparse.ArgumentParser) -> None:
    """What ``run`` and ``exec`` share: how to reach hosts, their environment, the job."""
    _add_connection_options(parser)
    _add_environment_options(parser)
    _add_job_options(parser)
    slurmargs.add_options(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")


def _add_run(run: argparse.ArgumentParser) -> None:
    _add_job_command_options(run)
    run.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    run.add_argument("--master-port", help="a port number, or auto (default: the hosts file's)")
    run.add_argument(
        "--torchrun-args",
        default="",
        help='extra torchrun options; write --torchrun-args="--max-restarts 3"',
    )
    run.add_argument("--ranks", help="show only these global ranks on the console, e.g. 0,4-7")
    run.add_argument("hosts", help="hosts file (YAML or MPI hostfile), or slurm")
    run.add_argument("script", help="the training script (relative to the workdir)")
    # SCRIPT_ARGS never reach argparse: see split_passthrough.


def _add_exec(exe: argparse.ArgumentParser) -> None:
    _add_job_command_options(exe)
    exe.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop every host as soon as one fails (default: let every host finish)",
    )
    exe.add_argument("hosts", help="hosts file, or slurm; then [--] COMMAND [ARGS...]")


def _add_check(chk: argparse.ArgumentParser) -> None:
    _add_connection_options(chk)
    _add_environment_options(chk)
    slurmargs.add_options(chk)
    chk.add_argument("--master-port", help="a port number, or auto")
    chk.add_argument("hosts", help="hosts file, or slurm")
    chk.add_argument("script", nargs="?", help="also check this script exists on every host")


def _add_job_control(commands: Any) -> None:
    ps = commands.add_parser("ps", help="list running clusterlaunch jobs on the hosts")
    _add_connection_options(ps)
    ps.add_argument("--python", help="Python on the hosts (default: the hosts file's)")
    ps.add_argument("--json", action="store_true", help="one JSON object per job node")
    _add_setup_timeout(ps)
    ps.add_argument("hosts", help="hosts file")
    kill = commands.add_parser("kill", help="tear one job down on every host")
    _add_connection_options(kill)
    kill.add_argument("--python", help="Python on the hosts (default: the hosts file's)")
    _add_setup_timeout(kill)
    kill.add_argument("hosts", help="hosts file")
    kill.add_argument("job_id", help="the job id (see clusterlaunch ps)")


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument("--ssh-config", help="SSH client config (default: ~/.ssh/config)")
    group.add_argument(
        "--host-key-policy",
        choices=POLICIES,
        help="strict: refuse unknown host keys; accept-new: record them. Default: the SSH "
        "config's StrictHostKeyChecking (yes/ask = strict), else accept-new. A changed key "
        "is always refused; checking is never turned off",
    )
    group.add_argument("--fanout", type=int, default=64, help="parallel connections (default 64)")
    group.add_argument("--connect-timeout", type=float, default=10.0, help="seconds (default 10)")


def _add_environment_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("environment on the hosts")
    group.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a variable on every host (repeatable; wins over the hosts file)",
    )
    group.add_argument(
        "--forward-env",
        action="append",
        default=[],
        metavar="PATTERN",
        help="forward local variables matching this glob, e.g. 'NCCL_*' (repeatable)",
    )
    group.add_argument(
        "--python",
        help="Python on the hosts (default: the hosts file's, else python3; "
        "for localhost, the Python running clusterlaunch)",
    )
    group.add_argument("--workdir", help="directory on the hosts (default: this directory's path)")
    _add_setup_timeout(group)


def _add_setup_timeout(parser: Any) -> None:
    parser.add_argument(
        "--setup-timeout",
        type=float,
        default=DEFAULT_SETUP_TIMEOUT,
        metavar="SECONDS",
        help="stop a host's setup: that runs longer, and report it (default "
        f"{DEFAULT_SETUP_TIMEOUT:g})",
    )


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job")
    group.add_argument(
        "--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL (default 5)"
    )
    group.add_argument("--timeout", type=float, help="wall-clock limit for the job (exit 124)")
    group.add_argument("--log-dir", help="write one log per rank and the controller's log here")
    group.add_argument("--job-id", help="use this job id instead of a generated one")
    group.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=15.0,
        help="hosts end their part of the job after this long without hearing "
        "from the controller (default 15)",
    )
    group.add_argument(
        "--sync",
        action="store_true",
        help="first copy this directory to every host's workdir (rsync or SFTP; "
        "honours .clusterlaunchignore, skips .git, sends changed files only)",
    )


def split_passthrough(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Split ``argv`` into clusterlaunch's words and the words passed through untouched.

    ``run``: everything after SCRIPT is the script's, exactly as typed (argparse's
    handling of ``--`` and dash-words there differs between Python versions).
    ``exec``: options may follow HOSTS; the command starts after ``--`` or at
    the first word that is not an option.
    """
    words = list(argv)
    command_index = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
    if command_index is None or words[command_index] not in _PASSTHROUGH_AFTER:
        return words, []
    command = words[command_index]
    takes_value = {
        option
        for action in _subparser(parser, command)._actions  # no public arity table
        for option in action.option_strings
        if action.nargs != 0
    }
    wanted = _PASSTHROUGH_AFTER[command]
    seen = 0
    index = command_index + 1
    options_done = False
    while index < len(words):
        word = words[index]
        if seen == wanted:
            if command == "run":
                break  # everything after SCRIPT is the script's
            if word == "--":  # exec HOSTS [OPTIONS] -- COMMAND
                return words[:index], words[index + 1 :]
            if not word.startswith("-") or word == "-":
                break  # exec HOSTS [OPTIONS] COMMAND
        index += 1
        if word == "--" and not options_done:
            options_done = True
        elif word.startswith("-") and word != "-" and not options_done:
            if word in takes_value:
                index += 1  # the option's value
        else:
            seen += 1
    return words[:index], words[index:]


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


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
    job_id = getattr(args, "job_id", None)
    if job_id is not None and not _JOB_ID.fullmatch(job_id):
        raise UsageError(f"--job-id {job_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    grace = getattr(args, "grace", 5.0)
    heartbeat = getattr(args, "heartbeat_timeout", 15.0)
    if grace < 0 or heartbeat <= 1:
        raise UsageError("--grace must be >= 0 and --heartbeat-timeout > 1")
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
        grace=grace,
        heartbeat_timeout=heartbeat,
        setup_timeout=checked_timeout(getattr(args, "setup_timeout", DEFAULT_SETUP_TIMEOUT)),
    )


def job_request(args: argparse.Namespace) -> JobRequest:
    """Everything ``run``/``exec``/``check`` need, from the flags and the hosts."""
    options = launch_options(args)
    inventory, targets, transport = slurmargs.hosts(args)
    rank_filter = None
    if getattr(args, "ranks", None):
        world = sum(spec.gpus for spec in inventory.hosts)
        try:
            rank_filter = parse_rank_filter(args.ranks, world)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if args.fanout < 1:
        raise UsageError("--fanout must be at least 1")
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
    )


def exec_argv(args: argparse.Namespace) -> tuple[str, ...]:
    """The command ``exec`` runs on every host."""
    argv = tuple(args.passthrough)
    if not argv:
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
