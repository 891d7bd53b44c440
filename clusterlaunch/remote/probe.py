"""Preflight probe for ``clusterlaunch check``: checks one host, starts nothing (stdlib only).

The checks are :mod:`clusterlaunch.remote.checks`, the same the agent makes
before a ``run``. Reports each stage as an event frame of
:mod:`clusterlaunch.core.protocol` on stdout (whatever a chatty shell printed
before the sync marker is noise to the controller): ``static``, then, once the
controller sends node 0's port on stdin, ``connect``; node 0 keeps its
listener open until stdin says ``done``; ``end`` last.

Started with ``-S``, as the agent: it first takes its stdout out of reach
(:mod:`clusterlaunch.remote.channel`), then runs ``site.main()`` for the job's
own ``sys.path``, whose ``sitecustomize.py`` or ``.pth`` files may print.
"""

import argparse
import sys

from clusterlaunch.core.protocol import SYNC, encode_event  # bundle: strip
from clusterlaunch.remote.channel import take_channel, write_all  # bundle: strip
from clusterlaunch.remote.checks import connect_stage, start_serving, static_stage  # bundle: strip
from clusterlaunch.remote.teardown import ending_setup_leftovers  # bundle: strip


def report(channel, **fields):
    """One stage's findings, as an event frame (``stage`` names it)."""
    write_all(channel, encode_event(fields))


def read_line():
    line = sys.stdin.readline()
    return line.strip()


def main(argv=None):
    channel = take_channel()  # first: before site.main() or a -m search
    import site

    site.main()  # the job's sys.path: the torch it would import, -m modules
    return ending_setup_leftovers(probe, argv, channel)


def probe(argv, channel):
    parser = argparse.ArgumentParser(prog="clusterlaunch-probe")
    parser.add_argument("--script")
    parser.add_argument("--module")
    parser.add_argument("--program")
    parser.add_argument("--accelerator")
    parser.add_argument("--need-torch", action="store_true")
    parser.add_argument("--listen", type=int, help="node 0: bind this port (0 = auto)")
    parser.add_argument("--master-addr")
    parser.add_argument("--nonce", default="")
    parser.add_argument("--timeout", type=float, required=True)  # core/defaults.py
    parser.add_argument("--job-id")
    parser.add_argument("--node-rank", type=int)
    args = parser.parse_args(argv)
    write_all(channel, SYNC)
    fields, listener = static_stage(args)
    report(channel, stage="static", **fields)
    serving = start_serving(listener, args.nonce.encode(), args.timeout)
    if args.master_addr:
        connect = connect_stage(args, read_line())
        if connect is not None:
            report(channel, stage="connect", **connect)
    if listener is not None:
        # Wait for the controller: every peer has dialled (or EOF: it gave up).
        while read_line() not in ("done", ""):
            pass
        serving.stop()
    report(channel, stage="end")


if __name__ == "__main__":
    main()
