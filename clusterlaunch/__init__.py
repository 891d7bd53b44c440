"""clusterlaunch: one command for a multi-machine PyTorch job.

Plans ranks from a hosts file, starts torchrun (static rendezvous) on every
host over SSH, streams every rank's output with its global rank, and tears the
whole job down on every host when one rank fails, a host is lost, or you press
Ctrl-C.
"""

import sys

# Every way in (the console script's clusterlaunch.cli.main, python -m clusterlaunch)
# imports this first. An older Python ended in a traceback from whichever module it
# reached (3.9: dataclass's kw_only; 3.8: list[str]; 3.7 and 2.7: a SyntaxError), so
# this file parses on Python 2.7 too. The hosts never import it: their programs are
# bundled sources (clusterlaunch.remote), and need only Python 3.8.
if sys.version_info < (3, 10):
    sys.stderr.write(
        "clusterlaunch: error: %s is Python %d.%d; clusterlaunch needs Python 3.10 or newer"
        " on this machine (install it into a newer Python's environment)\n"
        % (sys.executable, sys.version_info[0], sys.version_info[1])
    )
    sys.exit(2)  # ExitStatus.USAGE (core/exits.py, which an older Python cannot import)

__version__ = "0.1.0"
