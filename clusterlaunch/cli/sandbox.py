"""The command line's sandbox part: ``sandbox up|down`` options, without the sandbox itself.

Registering the options must not import the simulated cluster (35 ms, paid by
every ``clusterlaunch`` start otherwise); :func:`run` imports it when the
command actually runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, BinaryIO

from clusterlaunch.core import limits
from clusterlaunch.core.defaults import SANDBOX_DIR as DEFAULT_DIR
from clusterlaunch.core.defaults import SANDBOX_FIRST_PORT as FIRST_PORT
from clusterlaunch.core.defaults import SANDBOX_HOSTS as DEFAULT_HOSTS
from clusterlaunch.core.defaults import SANDBOX_MAX_HOSTS as MAX_HOSTS
from clusterlaunch.core.exits import ExitStatus


def add_parser(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Register ``sandbox up`` and ``sandbox down`` under the ``commands`` subparsers."""
    sandbox = commands.add_parser("sandbox", help="start or stop a simulated cluster here")
    actions = sandbox.add_subparsers(
        dest="sandbox_command", metavar="up|down", required=True, parser_class=parser_class
    )
    start = actions.add_parser("up", help="start simulated hosts, write a hosts file")
    hosts = limits.Number("--hosts", 1, MAX_HOSTS, "a whole number", whole=True)
    gpus = limits.Number("--gpus", 1, limits.MAX_PROCS_PER_HOST, "a whole number", whole=True)
    port = limits.Number("--port", 1, 65535, "a TCP port", whole=True)
    start.add_argument("--hosts", type=hosts, default=DEFAULT_HOSTS, help="how many (default 3)")
    start.add_argument("--gpus", type=gpus, default=1, help="processes per host (default 1)")
    start.add_argument("--port", type=port, help=f"sshd port (default: free one from {FIRST_PORT})")
    start.add_argument(
        "--slurm",
        action="store_true",
        help="also a real one-node Slurm (munge, slurmctld, slurmd; root) for run slurm",
    )
    stop = actions.add_parser("down", help="stop the hosts, kill leftovers, remove the directory")
    for sub in (start, stop):
        sub.add_argument(
            "--dir", type=_directory, default=DEFAULT_DIR, help=f"directory (default {DEFAULT_DIR})"
        )


def _directory(text: str) -> str:
    return limits.text("--dir", text, sent=False)


def run(args: argparse.Namespace, out: BinaryIO) -> int:
    """Run ``sandbox up`` or ``sandbox down``, printing to ``out``; returns the exit status.

    The simulated cluster is imported only now (35 ms otherwise paid by every start).
    """
    from clusterlaunch.testing import sandbox, sandboxtext
    from clusterlaunch.testing.sshd import SSHD, SimClusterError

    cwd = Path.cwd()
    directory = Path(args.dir).absolute()
    try:
        if args.sandbox_command == "up":
            sshd = os.environ.get(sandbox.SSHD_ENV) or SSHD
            started = sandbox.up(directory, args.hosts, args.gpus, args.port, sshd, args.slurm)
            text = sandboxtext.up_text(started, cwd)
        else:
            text = sandboxtext.down_text(sandbox.down(directory), directory, cwd)
    except SimClusterError as exc:  # e.g. a stale sandbox's sshd that would not die
        raise sandbox.SandboxError(f"sandbox {args.sandbox_command}: {exc}") from None
    out.write(text.encode())
    out.flush()
    return ExitStatus.OK
