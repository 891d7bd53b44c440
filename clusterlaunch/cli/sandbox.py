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

from clusterlaunch.core.defaults import SANDBOX_DIR as DEFAULT_DIR
from clusterlaunch.core.defaults import SANDBOX_FIRST_PORT as FIRST_PORT
from clusterlaunch.core.defaults import SANDBOX_HOSTS as DEFAULT_HOSTS


def add_parser(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """Register ``sandbox up`` and ``sandbox down`` under the ``commands`` subparsers."""
    sandbox = commands.add_parser("sandbox", help="start or stop a simulated cluster here")
    actions = sandbox.add_subparsers(
        dest="sandbox_command", metavar="up|down", required=True, parser_class=parser_class
    )
    start = actions.add_parser("up", help="start simulated hosts, write a hosts file")
    start.add_argument("--hosts", type=int, default=DEFAULT_HOSTS, help="how many (default 3)")
    start.add_argument("--gpus", type=int, default=1, help="processes per host (default 1)")
    start.add_argument("--port", type=int, help=f"sshd port (default: free one from {FIRST_PORT})")
    stop = actions.add_parser("down", help="stop the hosts, kill leftovers, remove the directory")
    for sub in (start, stop):
        sub.add_argument("--dir", default=DEFAULT_DIR, help=f"directory (default {DEFAULT_DIR})")


def run(args: argparse.Namespace, out: BinaryIO) -> int:
    """Run ``sandbox up`` or ``sandbox down``, printing to ``out``; returns the exit status.

    The simulated cluster is imported only now (35 ms otherwise paid by every start).
    """
    from clusterlaunch.testing import sandbox
    from clusterlaunch.testing.sshd import SSHD, SimClusterError

    cwd = Path.cwd()
    directory = Path(args.dir).absolute()
    try:
        if args.sandbox_command == "up":
            sshd = os.environ.get(sandbox.SSHD_ENV) or SSHD
            text = sandbox.up_text(
                sandbox.up(directory, args.hosts, args.gpus, args.port, sshd), cwd
            )
        else:
            text = sandbox.down_text(sandbox.down(directory), directory, cwd)
    except SimClusterError as exc:  # e.g. a stale sandbox's sshd that would not die
        raise sandbox.SandboxError(f"sandbox {args.sandbox_command}: {exc}") from None
    out.write(text.encode())
    out.flush()
    return 0
