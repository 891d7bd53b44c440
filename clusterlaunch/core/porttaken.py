"""Node 0's torchrun could not listen on the master port: the one line that says so.

The preflight proves the master port free on node 0 by holding it while every
node dials it, and node 0's agent holds it until the instant before it starts
torchrun; but torchrun imports torch for a second or more before its store
binds the port, and anything that binds it in between (a process waiting for
the port, another job with the same fixed port) wins. torchrun then ends with
some 40 lines of traceback whose last one says it in torch's words, and no
worker ever started; the other nodes were never let dial the port
(``remote/storewait.py``). The summary says what happened and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# torch's words: "The server socket has failed to listen on any local network address.
# port: 29500, ..., name: EADDRINUSE, ..." (libuv, torch >= 2.4), or "... failed to
# bind to [::]:29500 (errno: 98 - Address already in use)." (before it).
_STORE_FAILED = re.compile(r"server socket has failed to (?:listen|bind)")
_IN_USE = re.compile(r"EADDRINUSE|errno: 98|[Aa]ddress already in use")


def port_taken(last_lines: Sequence[str], argv: Sequence[str]) -> str:
    """``"; ..."``: what happened and the fix, when a host's ``last_lines`` say its
    torchrun (``argv``) could not listen on the master port because something holds it;
    else ``""``."""
    if not any(_STORE_FAILED.search(line) and _IN_USE.search(line) for line in last_lines):
        return ""
    given = "--master-port" in argv[:-1]
    port = f" {argv[list(argv).index('--master-port') + 1]}" if given else ""
    return (
        f": its torchrun could not listen on the master port{port}, which something else "
        "took after the preflight had checked it free (EADDRINUSE); run again with "
        "master_port: auto (--master-port auto), or free the port or choose another"
    )
