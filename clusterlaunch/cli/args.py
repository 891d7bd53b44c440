"""From parsed flags to a request: everything checked before any file is read or host contacted.

The parser itself is :mod:`clusterlaunch.cli.parser`, which gives every
command's namespace every attribute read here (``core.defaults.SHARED_ATTRIBUTES``);
:mod:`clusterlaunch.cli.main` runs the request and maps errors to exit
statuses. Bad input raises ``UsageError``.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Sequence
from pathlib import Path

from clusterlaunch.cli import restartargs
from clusterlaunch.cli import slurm as slurmargs
from clusterlaunch.controller.request import JobRequest
from clusterlaunch.core import defaults, envpolicy, limits
from clusterlaunch.core.checkplan import check_exec_words
from clusterlaunch.core.envfile import read_env_file
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import (
    HostSpec,
    Inventory,
    JobPlan,
    LaunchOptions,
    NodePlan,
    ScriptKind,
)
from clusterlaunch.core.planner import new_job_id, parse_env_assignments
from clusterlaunch.core.rankfilter import parse_rank_filter
from clusterlaunch.core.torchrunargs import parse_torchrun_args
from clusterlaunch.transport import SshSettings
from clusterlaunch.transport.local import local_path

_ASCII_NUMBER = re.compile(r"[0-9]+")
_DELETED = " (deleted)"
"""What the kernel appends to /proc/self/cwd's target once the directory is removed."""
_FORWARD_PATTERN = re.compile(r"[A-Za-z0-9_*?\[\]!^-]+")


def check_words(args: argparse.Namespace) -> None:
    """What every command checks in its text flags, before reading any file.

    Blank values are refused (``--workdir ''`` silently meant the default);
    words sent to the hosts must be UTF-8 (non-UTF-8 bytes in argv arrive as
    surrogate escapes and failed to encode after the preflight).
    """
    sent = {"--python": args.python, "--workdir": args.workdir, "SCRIPT": args.script}
    local = {"HOSTS": args.hosts, "--ssh-config": args.ssh_config, "--log-dir": args.log_dir}
    local |= {"--include": args.include, "--exclude": args.exclude}
    for texts, is_sent in ((sent, True), (local, False)):
        for flag, value in texts.items():
            if value is not None:
                limits.text(flag, value, sent=is_sent)
    for pattern in args.forward_env:
        limits.text("--forward-env", pattern, sent=False)
        if not _FORWARD_PATTERN.fullmatch(pattern):  # it could match no variable: silent
            raise UsageError(
                f"--forward-env {limits.shown(pattern)}: a pattern names variables to copy "
                "(letters, digits, _ and the globs * ? [...]); to set one, use --env NAME=VALUE"
            )
    for name in args.env_file:
        limits.text("--env-file", name, sent=False)
    for pair in args.env:  # a name is shown; a value, or a word that may be one, never
        name, equals, value = pair.partition("=")
        if equals:
            limits.sendable("--env", name)
        limits.sendable_value(
            envpolicy.env_flag(name) if equals else "--env", value if equals else pair
        )
    limits.sendable("--torchrun-args", args.torchrun_args)
    words = "COMMAND" if args.command == "exec" else "SCRIPT_ARGS"
    for word in args.passthrough:
        limits.sendable(words, word)
    if args.job_id is not None:
        limits.job_id("JOB_ID" if args.command in ("kill", "stacks") else "--job-id", args.job_id)


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The job-shaping flags, validated."""
    port_text = args.master_port
    port_auto = port_text == "auto"
    port = None
    if port_text is not None and not port_auto:
        if not _ASCII_NUMBER.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise UsageError(f"--master-port {port_text}: use auto or a TCP port 1-65535")
        port = int(port_text)
    if args.python is not None and ("=" in args.python or "\n" in args.python):
        raise UsageError(f"--python {args.python!r}: must be a path without '=' or newlines")
    if args.stall_action == "kill" and args.stall_timeout is None:
        raise UsageError("--stall-action kill: give --stall-timeout SECONDS too")
    if args.json and not args.dry_run:
        raise UsageError("--json goes with --dry-run (a running job prints its ranks' output)")
    from_files = tuple(
        pair for name in args.env_file for pair in read_env_file(name).items()
    )  # command-line order, as --env: a later file wins, and --env wins over every file
    return LaunchOptions(
        script=args.script or "",
        script_args=tuple(args.passthrough if args.command == "run" else ()),
        script_kind=script_kind(args),
        env=(*from_files, *parse_env_assignments(args.env)),
        forward_env=tuple(args.forward_env),
        master_port=port,
        master_port_auto=port_auto,
        python=args.python,
        workdir=args.workdir,
        torchrun_args=parse_torchrun_args(args.torchrun_args),
        grace=args.grace,
        heartbeat_timeout=args.heartbeat_timeout,
        setup_timeout=args.setup_timeout,
    )


def script_kind(args: argparse.Namespace) -> ScriptKind:
    """``-m``: a module; ``--no-python``: a program; else a file torchrun runs with python."""
    if (args.script or "").startswith("-"):  # after "--": torchrun would take it as an option
        raise UsageError(
            f"{args.script}: torchrun reads a name that starts with '-' as an option; "
            f"write ./{args.script}"
        )
    if args.module:
        if not args.script:
            raise UsageError("-m: give the module after HOSTS: clusterlaunch check -m h.yaml pkg")
        if "/" in args.script or "" in args.script.split("."):  # python -m: "Relative ..."
            raise UsageError(
                f"-m {args.script}: a module is named with dots (pkg.train), not a path; "
                "for a file, leave out -m"
            )
        return "module"
    if args.no_python and not args.script:  # as -m: the flag names what SCRIPT is
        raise UsageError(
            "--no-python: give the program after HOSTS: clusterlaunch check --no-python "
            "h.yaml ./train.sh"
        )
    return "program" if args.no_python else "file"


def job_request(args: argparse.Namespace) -> JobRequest:
    """Everything ``run``/``exec``/``check`` need, from the flags and the hosts."""
    options = launch_options(args)
    inventory, targets, transport = slurmargs.hosts(args)
    inventory, targets, spares = restartargs.split_spares(inventory, targets, args.command)
    rank_filter = None
    if args.ranks is not None:  # --ranks '' too: it names no rank
        counts = [spec.gpus for spec in inventory.hosts]
        world = None if None in counts else sum(c or 0 for c in counts)  # None: gpus: auto
        try:
            rank_filter = parse_rank_filter(args.ranks, world)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return JobRequest(
        inventory=inventory,
        targets=targets,
        options=options,
        job_id=args.job_id or new_job_id(),
        job_id_given=args.job_id is not None,
        ssh=ssh_settings(args, inventory),
        exec_argv=exec_argv(args) if args.command == "exec" else None,
        fanout=args.fanout,
        timeout=args.timeout,
        rank_filter=rank_filter,
        log_dir=args.log_dir,
        transport=transport,
        fail_fast=args.fail_fast,
        sync=args.sync,
        restarts=(policy := restartargs.policy(args, inventory, spares)),
        spares=spares,
        restart_count=0 if policy.enabled else None,
        verbose=args.verbose,
        stall_timeout=args.stall_timeout,
        stall_action=args.stall_action,
    )


def check_env_sizes(hosts: Sequence[HostSpec]) -> None:
    """``ps``, ``kill``, ``stacks``: each host's ``env:`` must fit its ``exec`` (jobctl
    carries it); one too big failed on the hosts with "Argument list too long"."""
    for spec in hosts:
        check_exec_words(spec.host, spec.env, [])


def ssh_settings(args: argparse.Namespace, inventory: Inventory) -> SshSettings:
    """Connection flags shared by every command; ``--ssh-client`` wins over ``ssh_client:``."""
    return SshSettings(
        host_key_policy=args.host_key_policy,
        connect_timeout=args.connect_timeout,
        config_path=args.ssh_config,
        client=args.ssh_client or inventory.ssh_client or defaults.SSH_CLIENT,
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
    there; and only for a script torchrun runs with python (a file, a zipapp, a
    directory with ``__main__.py``), or a ``--no-python`` program
    named by a path (without a ``/`` it is looked up in the hosts' PATH). A
    module (``-m``) may be installed on the hosts: the preflight checks it.
    """
    here = os.path.realpath(cwd or os.getcwd())
    same_dir = synced or all(os.path.realpath(_local(node)) == here for node in plan.nodes)
    local = Path(here) / options.script
    if not same_dir or options.script_kind == "module":
        return
    if options.script_kind == "file":
        _check_script(options.script, local)
    if options.script_kind == "program" and "/" in options.script:
        if local.is_dir():
            raise UsageError(f"{options.script}: a directory; name the program in it (--no-python)")
        if not local.is_file():
            raise UsageError(f"{options.script}: no such program here (--no-python)")
        if not os.access(local, os.X_OK):
            raise UsageError(f"{options.script}: not executable; chmod +x it (--no-python)")


def _local(node: NodePlan) -> str:
    """A workdir as this machine would find it (``localhost``: under the home directory)."""
    return local_path(node.workdir) if node.target.is_local else node.workdir


def _check_script(script: str, local: Path) -> None:
    """What ``python SCRIPT`` runs: a file (a script, a zipapp) or a directory's ``__main__.py``."""
    if local.is_dir():
        if not (local / "__main__.py").is_file():
            raise UsageError(
                f"{script}: a directory without __main__.py here; python runs a directory "
                "by its __main__.py (the hosts run it from this directory)"
            )
    elif not local.is_file():
        raise UsageError(f"{script}: no such script here (the hosts run it from this directory)")


def current_directory() -> str:
    """The current directory (the default workdir, what relative paths mean); UsageError
    when it was deleted: os.getcwd()'s ENOENT was ``No such file or directory``, exit 1,
    naming nothing, even with every path absolute."""
    try:
        return os.getcwd()
    except FileNotFoundError:
        try:
            gone = os.readlink("/proc/self/cwd").removesuffix(_DELETED)
        except OSError:
            gone = os.environ.get("PWD", "its path is unknown")
        raise UsageError(
            f"the current directory was deleted ({gone}); cd to an existing directory"
        ) from None
