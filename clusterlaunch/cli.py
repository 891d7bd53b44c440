"""The command line: the one place that maps errors to exit statuses and handles signals.

Exit statuses: 0 success; the first failing rank's own exit code; 2 bad input
or failed preflight; 124 ``--timeout``; 129/130/143 after SIGHUP/Ctrl-C/SIGTERM;
255 a host was lost or could not be started.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from clusterlaunch import __version__, jobs, render, sandbox, slurmargs
from clusterlaunch.errors import ClusterlaunchError, PreflightError, UsageError
from clusterlaunch.hostfile import load_inventory
from clusterlaunch.launcher import JobRequest, check, launch, make_plan
from clusterlaunch.logs import parse_rank_filter
from clusterlaunch.model import LaunchOptions
from clusterlaunch.planner import new_job_id, parse_env_assignments, parse_torchrun_args
from clusterlaunch.streams import Console
from clusterlaunch.supervisor import StopJob
from clusterlaunch.transport import POLICIES, SshSettings, close_all, connect_all
from clusterlaunch.transport.sshconfig import resolve_targets

EXIT_USAGE = 2
_ASCII_NUMBER = re.compile(r"[0-9]+")
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SIGNAL_EXITS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
_SIGNAL_NAMES = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line instead of a usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``clusterlaunch`` argument parser."""
    parser = _Parser(prog="clusterlaunch", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"clusterlaunch {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run a torchrun job on every host")
    _add_connection_options(run)
    _add_job_options(run)
    slurmargs.add_options(run)
    run.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")
    run.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    run.add_argument("--master-port", help="a port number, or auto (default: the hosts file's)")
    run.add_argument(
        "--torchrun-args",
        default="",
        help='extra torchrun options; write --torchrun-args="--max-restarts 3"',
    )
    run.add_argument("--ranks", help="show only these global ranks on the console, e.g. 0,4-7")
    run.add_argument("hosts", help="hosts file (YAML or MPI hostfile)")
    run.add_argument("script", help="the training script (relative to the workdir)")
    # SCRIPT_ARGS never reach argparse: see split_passthrough.

    exe = commands.add_parser("exec", help="run a command on every host")
    _add_connection_options(exe)
    _add_job_options(exe)
    slurmargs.add_options(exe)
    exe.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")
    exe.add_argument(
        "--fail-fast",
        action="store_true",
        help="stop every host as soon as one fails (default: let every host finish)",
    )
    exe.add_argument("hosts", help="hosts file; then -- COMMAND [ARGS...]")

    chk = commands.add_parser("check", help="run the preflight checks only")
    _add_connection_options(chk)
    _add_job_options(chk)
    slurmargs.add_options(chk)
    chk.add_argument("--master-port", help="a port number, or auto")
    chk.add_argument("hosts", help="hosts file")
    chk.add_argument("script", nargs="?", help="also check this script exists on every host")
    _add_job_control(commands)
    sandbox.add_parser(commands, _Parser)  # sandbox up|down: see clusterlaunch/sandbox.py
    for sub in (run, exe):  # not check: it changes nothing (docs/sync.md)
        sub.add_argument(
            "--sync",
            action="store_true",
            help="first copy this directory to every host's workdir (rsync or SFTP; "
            "honours .clusterlaunchignore, skips .git, sends changed files only)",
        )
    return parser


def _add_job_control(commands: Any) -> None:
    ps = commands.add_parser("ps", help="list running clusterlaunch jobs on the hosts")
    _add_connection_options(ps)
    ps.add_argument("--python", help="Python on the hosts (default: the hosts file's)")
    ps.add_argument("--json", action="store_true", help="one JSON object per job node")
    ps.add_argument("hosts", help="hosts file")
    kill = commands.add_parser("kill", help="tear one job down on every host")
    _add_connection_options(kill)
    kill.add_argument("--python", help="Python on the hosts (default: the hosts file's)")
    kill.add_argument("hosts", help="hosts file")
    kill.add_argument("job_id", help="the job id (see clusterlaunch ps)")


# How many positionals come before the words passed through untouched.
_PASSTHROUGH_AFTER = {"run": 2, "exec": 1}


def split_passthrough(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Split ``argv`` after SCRIPT (``run``) or HOSTS (``exec``).

    argparse's handling of ``--`` and of dash-words after a positional differs
    between Python versions; here the words after SCRIPT reach the script
    exactly as typed, on every version.
    """
    words = list(argv)
    command_index = next((i for i, w in enumerate(words) if not w.startswith("-")), None)
    if command_index is None or words[command_index] not in _PASSTHROUGH_AFTER:
        return words, []
    wanted = _PASSTHROUGH_AFTER[words[command_index]]
    sub = _subparser(parser, words[command_index])
    takes_value = {
        option
        for action in sub._actions  # argparse keeps no public arity table
        for option in action.option_strings
        if action.nargs != 0
    }
    seen = 0
    index = command_index + 1
    options_done = False
    while index < len(words) and seen < wanted:
        word = words[index]
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


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job")
    group.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    group.add_argument("--forward-env", action="append", default=[], metavar="PATTERN")
    group.add_argument(
        "--python", help="Python on the hosts (default: the hosts file's, or python3)"
    )
    group.add_argument("--workdir", help="directory on the hosts (default: this directory's path)")
    group.add_argument(
        "--grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL"
    )
    group.add_argument(
        "--timeout", type=float, help="wall-clock limit for the whole job (exit 124)"
    )
    group.add_argument("--log-dir", help="write one log per rank and the controller's log here")
    group.add_argument("--job-id", help="use this job id instead of a generated one")
    group.add_argument(
        "--heartbeat-timeout",
        type=float,
        default=15.0,
        help="hosts tear their job down after this long without hearing from the controller",
    )


def _options(args: argparse.Namespace) -> LaunchOptions:
    port_text = getattr(args, "master_port", None)
    port_auto = port_text == "auto"
    port = None
    if port_text is not None and not port_auto:
        if not _ASCII_NUMBER.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
            raise UsageError(f"--master-port {port_text}: use auto or a TCP port 1-65535")
        port = int(port_text)
    script_args = list(getattr(args, "passthrough", []) or [])
    if args.python is not None and ("=" in args.python or "\n" in args.python):
        raise UsageError(f"--python {args.python!r}: must be a path without '=' or newlines")
    if args.job_id is not None and not _JOB_ID.fullmatch(args.job_id):
        raise UsageError(f"--job-id {args.job_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    if args.grace < 0 or args.heartbeat_timeout <= 1:
        raise UsageError("--grace must be >= 0 and --heartbeat-timeout > 1")
    return LaunchOptions(
        script=getattr(args, "script", None) or "",
        script_args=tuple(script_args),
        env=parse_env_assignments(args.env),
        forward_env=tuple(args.forward_env),
        master_port=port,
        master_port_auto=port_auto,
        python=args.python,
        workdir=args.workdir,
        torchrun_args=parse_torchrun_args(getattr(args, "torchrun_args", "") or ""),
        grace=args.grace,
        heartbeat_timeout=args.heartbeat_timeout,
    )


def _request(args: argparse.Namespace, exec_argv: tuple[str, ...] | None) -> JobRequest:
    options = _options(args)
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
        job_id=args.job_id or new_job_id(),
        ssh=SshSettings(
            host_key_policy=args.host_key_policy,
            connect_timeout=args.connect_timeout,
            config_path=args.ssh_config,
        ),
        exec_argv=exec_argv,
        fanout=args.fanout,
        timeout=args.timeout,
        rank_filter=rank_filter,
        log_dir=args.log_dir,
        transport=transport,
        fail_fast=getattr(args, "fail_fast", False),
        sync=getattr(args, "sync", False),
    )


def _check_local_script(args: argparse.Namespace, options: LaunchOptions) -> None:
    """Catch a mistyped script before contacting anything, when we can tell locally."""
    runs_elsewhere = args.workdir is not None or any(
        word in ("--no-python", "--no_python", "-m", "--module") for word in options.torchrun_args
    )
    if not runs_elsewhere and not Path(options.script).is_file():
        raise UsageError(
            f"{options.script}: no such script here (the hosts run it from this directory)"
        )


def _exec_argv(args: argparse.Namespace) -> tuple[str, ...]:
    argv = list(args.passthrough)
    if argv[:1] == ["--"]:  # the documented separator: exec HOSTS -- COMMAND
        argv = argv[1:]
    if not argv:
        raise UsageError(
            "exec: give a command after --, e.g. clusterlaunch exec hosts.yaml -- hostname"
        )
    return tuple(argv)


def _job_control(args: argparse.Namespace, console: Console) -> int:
    inventory = load_inventory(args.hosts)
    targets = resolve_targets(args.ssh_config, inventory.hosts)
    settings = SshSettings(
        host_key_policy=args.host_key_policy,
        connect_timeout=args.connect_timeout,
        config_path=args.ssh_config,
    )
    connections, problems = connect_all(targets, settings, args.fanout)
    try:
        if problems:
            raise PreflightError(problems, render.problems_text(problems))
        if args.command == "ps":
            found = jobs.list_jobs(inventory.hosts, targets, connections, args.python)
            text = render.jobs_json(found) if args.json else render.jobs_text(found)
            console.out.write(text.encode() + b"\n")
            return 0
        reports = jobs.kill_job(inventory.hosts, targets, connections, args.job_id, args.python)
    finally:
        close_all(connections)
    if not reports:
        console.err.write(f"clusterlaunch: no running job {args.job_id} on these hosts\n".encode())
        return 1
    console.out.write(render.kill_text(args.job_id, reports).encode() + b"\n")
    return 0 if all(r.stopped for r in reports) else 1


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command in ("ps", "kill"):
        return _job_control(args, console)
    if args.command == "sandbox":
        return sandbox.run_command(args, console.out)
    exec_argv = _exec_argv(args) if args.command == "exec" else None
    request = _request(args, exec_argv)
    if args.command == "run" and not args.dry_run:
        _check_local_script(args, request.options)
    if getattr(args, "dry_run", False):
        plan = make_plan(request)
        text = render.plan_json(plan) if getattr(args, "json", False) else render.plan_text(plan)
        if not getattr(args, "json", False):
            text += slurmargs.dry_run_note(request.transport)
        console.out.write(text.encode() + b"\n")
        return 0
    if args.command == "check":
        result = check(request)
        console.out.write(render.preflight_text(result).encode() + b"\n")
        return EXIT_USAGE if result.problems else 0
    outcome = launch(request, console)
    return outcome.exit_code  # the launcher has printed (and logged) the summary


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    # Signals become an exception, so every layer's ``finally`` runs teardown.
    which = signal.Signals(signum)
    raise StopJob(_SIGNAL_EXITS.get(which, 128 + signum), _SIGNAL_NAMES.get(which, which.name))


def _install_signal_handlers() -> None:
    for signum in _SIGNAL_EXITS:
        signal.signal(signum, _raise_stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns (and, as a script, exits with) the exit status."""
    console = Console()
    # paramiko logs connection failures with tracebacks; we report them ourselves.
    logging.getLogger("paramiko").addHandler(logging.NullHandler())
    try:
        parser = build_parser()
        head, passthrough = split_passthrough(parser, sys.argv[1:] if argv is None else argv)
        args = parser.parse_args(head)
        args.passthrough = passthrough
        _install_signal_handlers()
        return _run(args, console)
    except PreflightError as exc:
        console.err.write(f"clusterlaunch: {exc}; nothing was started\n{exc.table}\n".encode())
        return EXIT_USAGE
    except UsageError as exc:
        console.err.write(f"clusterlaunch: error: {exc}\n".encode())
        return EXIT_USAGE
    except StopJob as stop:
        console.err.write(f"clusterlaunch: {stop.reason}\n".encode())
        return stop.exit_code
    except ClusterlaunchError as exc:
        console.err.write(f"clusterlaunch: error: {exc}\n".encode())
        return 1
    finally:
        console.err.flush()
