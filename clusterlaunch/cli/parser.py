"""The ``clusterlaunch`` argument parser: commands, options, help texts.

:mod:`clusterlaunch.cli.args` reads what it parsed. Number flags are checked
against their ranges as they are parsed (types from :mod:`clusterlaunch.core.limits`).
"""

from __future__ import annotations

import argparse
from typing import Any

import clusterlaunch
from clusterlaunch.cli import doctor as doctorargs
from clusterlaunch.cli import restartargs
from clusterlaunch.cli import sandbox as sandboxargs
from clusterlaunch.cli import slurm as slurmargs
from clusterlaunch.core import defaults, limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.transport import CLIENTS, POLICIES

_GIVEN = "_options_given"
_PYTHON_HELP = """Python on the hosts (default: the hosts file's, else python3; for localhost,
the Python running clusterlaunch)"""
# Every job command's namespace carries every attribute cli/args.py, cli/slurm.py and
# cli/main.py read (plain attribute access): its own flags set theirs, these the rest.


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit 2 with one line instead of a usage dump.

    Options must be spelled in full (an abbreviation such as ``--gra 5`` would
    also throw off where SCRIPT starts), and each may be given once.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


class _Once(argparse._StoreAction):
    """Refuses an option given twice: which of ``--grace 1 --grace 60`` was meant?"""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given = namespace.__dict__.setdefault(_GIVEN, set())
        if option_string is not None and self.dest in given:
            raise UsageError(f"{option_string} is given twice; give each option once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    """The ``clusterlaunch`` argument parser."""
    summary = (clusterlaunch.__doc__ or "").strip().split("\n")[0]
    parser = Parser(prog="clusterlaunch", description=summary)
    parser.add_argument(
        "--version", action="version", version=f"clusterlaunch {clusterlaunch.__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_run(_job_command(commands, "run", "run a torchrun job on every host"))
    _add_exec(_job_command(commands, "exec", "run a command on every host"))
    _add_check(_job_command(commands, "check", "run the preflight checks only"))
    _add_job_control(commands)
    doctor = _job_command(commands, "doctor", "check the hosts for what makes jobs hang")
    for add in (_add_connection_options, _add_environment_options, slurmargs.add_options):
        add(doctor)
    doctorargs.add_doctor_options(doctor)
    sandboxargs.add_parser(commands, Parser)  # sandbox up|down: see clusterlaunch/sandbox.py
    return parser


def _job_command(commands: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """A subcommand that reads hosts, with every shared attribute set."""
    parser: argparse.ArgumentParser = commands.add_parser(name, help=summary)
    # The shared attributes first: the command's own flags keep their own defaults.
    parser.set_defaults(**defaults.SHARED_ATTRIBUTES)
    verbose = "also say on stderr what otherwise goes to controller.log only (retried handshakes)"
    parser.add_argument("-v", "--verbose", action="store_true", help=verbose)
    return parser


def _add_job_command_options(parser: argparse.ArgumentParser) -> None:
    """What ``run`` and ``exec`` share: how to reach hosts, their environment, the job."""
    _add_connection_options(parser)
    _add_environment_options(parser)
    _add_job_options(parser)
    slurmargs.add_options(parser)
    _add_selection_options(parser)
    parser.add_argument("--dry-run", action="store_true", help="print the plan, start nothing")


def _add_run(run: argparse.ArgumentParser) -> None:
    _add_job_command_options(run)
    _add_script_kind_options(run)
    run.add_argument("--json", action="store_true", help="with --dry-run: the plan as JSON")
    run.add_argument("--master-port", help="a port number, or auto (default: the hosts file's)")
    run.add_argument(
        "--torchrun-args",
        default="",
        help='extra torchrun options; write --torchrun-args="--max-restarts 3"',
    )
    run.add_argument("--ranks", help="show only these global ranks on the console, e.g. 0,4-7")
    restartargs.add_options(run)
    doctorargs.add_stall_options(run)
    run.add_argument("hosts", help="hosts file (YAML or MPI hostfile), or slurm")
    run.add_argument(
        "script",
        help="the training script (relative to the workdir); with -m a module, "
        "with --no-python a program",
    )
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
    _add_selection_options(chk)
    _add_script_kind_options(chk)
    chk.add_argument("--master-port", help="a port number, or auto")
    chk.add_argument("hosts", help="hosts file, or slurm")
    chk.add_argument("script", nargs="?", help="also check this script exists on every host")


def _add_job_control(commands: Any) -> None:
    ps = _jobctl_command(commands, "ps", "list running clusterlaunch jobs on the hosts")
    ps.add_argument("--json", action="store_true", help="one JSON object per job node")
    ps.add_argument("hosts", help="hosts file")
    for name, summary in (
        ("kill", "tear one job down on every host"),
        ("stacks", "print the Python stack of every worker of a running job (py-spy)"),
    ):
        command = _jobctl_command(commands, name, summary)
        command.add_argument("hosts", help="hosts file")
        command.add_argument("job_id", help="the job id (see clusterlaunch ps)")


def _jobctl_command(commands: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """``ps``, ``kill``, ``stacks``: connection flags, ``--python``, ``--setup-timeout``."""
    parser = _job_command(commands, name, summary)
    _add_connection_options(parser)
    parser.add_argument("--python", help=_PYTHON_HELP)  # ps, kill, stacks: planner.python_for
    _add_setup_timeout(parser)
    return parser


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--ssh-config", help="SSH config, as ssh -F (default: ~/.ssh/config, /etc/ssh/ssh_config)"
    )
    group.add_argument(
        "--host-key-policy",
        choices=POLICIES,
        help="strict: refuse unknown host keys; accept-new: record them. Default: the SSH "
        "config's StrictHostKeyChecking (yes/ask = strict), else accept-new. A changed key "
        "is always refused; checking is never turned off",
    )
    group.add_argument(
        "--ssh-client",
        choices=CLIENTS,
        help="paramiko: in-process SSH; openssh: the system ssh, one master connection per "
        "host, for what paramiko cannot do (certificates, FIDO keys, Kerberos, Match exec). "
        f"Default: the hosts file's ssh_client:, else {defaults.SSH_CLIENT}",
    )
    group.add_argument(
        "--fanout",
        type=limits.FANOUT,
        default=defaults.FANOUT,
        help=f"parallel connections (default {defaults.FANOUT})",
    )
    group.add_argument(
        "--connect-timeout",
        type=limits.CONNECT_TIMEOUT,
        default=defaults.CONNECT_TIMEOUT_S,
        help=f"seconds (default {defaults.CONNECT_TIMEOUT_S:g})",
    )


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
    group.add_argument("--python", help=_PYTHON_HELP)
    group.add_argument("--workdir", help="directory on the hosts (default: this directory's path)")
    group.add_argument(
        "--env-file",
        action="append",
        default=[],
        metavar="FILE",
        help="set the KEY=VALUE lines of FILE on every host (# comments; repeatable; "
        "--env wins over it)",
    )
    _add_setup_timeout(group)


def _add_selection_options(parser: argparse.ArgumentParser) -> None:
    """``--include``/``--exclude``: DeepSpeed's host and device selection (core/includes.py)."""
    group = parser.add_argument_group("host and device selection (DeepSpeed's syntax)")
    group.add_argument(
        "--include",
        metavar="SPEC",
        help="use only these hosts and devices: HOST[:SLOT,...][@HOST...], "
        "e.g. worker-0@worker-1:0,2",
    )
    group.add_argument(
        "--exclude", metavar="SPEC", help="use every host and device but these (same syntax)"
    )


def _add_script_kind_options(parser: argparse.ArgumentParser) -> None:
    """torchrun's ``-m`` and ``--no-python``: what SCRIPT names."""
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "-m",
        "--module",
        action="store_true",
        help="SCRIPT is a Python module, run as python -m SCRIPT (torchrun's -m)",
    )
    kind.add_argument(
        "--no-python",
        action="store_true",
        help="SCRIPT is a program run as it is, without python (torchrun's --no-python)",
    )


def _add_setup_timeout(parser: Any) -> None:
    parser.add_argument(
        "--setup-timeout",
        type=limits.SETUP_TIMEOUT,
        default=defaults.SETUP_TIMEOUT_S,
        metavar="SECONDS",
        help="stop a host's setup: that runs longer, and report it (default "
        f"{defaults.SETUP_TIMEOUT_S:g})",
    )


def _add_job_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job")
    group.add_argument(
        "--grace",
        type=limits.GRACE,
        default=defaults.GRACE_S,
        help=f"seconds between SIGTERM and SIGKILL (default {defaults.GRACE_S:g})",
    )
    group.add_argument(
        "--timeout",
        type=limits.TIMEOUT,
        help=f"wall-clock limit for the job (exit {ExitStatus.TIMEOUT})",
    )
    group.add_argument("--log-dir", help="write one log per rank and the controller's log here")
    group.add_argument("--job-id", help="use this job id instead of a generated one")
    group.add_argument(
        "--heartbeat-timeout",
        type=limits.HEARTBEAT_TIMEOUT,
        default=defaults.HEARTBEAT_TIMEOUT_S,
        help="hosts end their part of the job after this long without hearing "
        f"from the controller (default {defaults.HEARTBEAT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--sync",
        action="store_true",
        help="first copy this directory to every host's workdir (rsync or SFTP; "
        "honours .clusterlaunchignore, skips .git, sends changed files only)",
    )
