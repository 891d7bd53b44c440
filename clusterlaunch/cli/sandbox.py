"""The command line's sandbox part: ``sandbox up|down`` options, without the sandbox itself.

Registering the options must not import the simulated cluster (35 ms, paid by
every ``clusterlaunch`` start otherwise); :func:`run` imports it when the
command actually runs.
"""

from __future__ import annotations

import argparse
from typing import Any, BinaryIO

DEFAULT_DIR = ".sandbox"
DEFAULT_HOSTS = 3
FIRST_PORT = 22220  # clusterlaunch.testing.DEFAULT_PORT (a test keeps them equal)


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
    """Run ``sandbox up`` or ``sandbox down`` (see :mod:`clusterlaunch.testing.sandbox`)."""
    from clusterlaunch.testing import sandbox

    return sandbox.run_command(args, out)
