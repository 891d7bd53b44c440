"""What a signal to the controller does once the job is already stopping (pure).

A teardown lets the ranks' SIGTERM handlers finish (``--grace``). Only an
interactive interrupt asks to skip that: a second Ctrl-C, or a first one while
a failure or ``--timeout`` is tearing the job down. SIGHUP and SIGTERM start a
teardown and never hurry one, because neither means "now" when it comes again:

* one closing terminal sends SIGHUP more than once (the kernel's, and the
  shell's or the terminal emulator's passing it on; seen here: tmux's and the
  kernel's), often with every write to it failing (EIO) as well;
* one stop request may deliver SIGTERM twice (GNU ``timeout`` signals the
  process, then its process group), and the managers that send it (systemd,
  Kubernetes, Slurm, torchrun to its workers) follow it with their own SIGKILL
  when they stop waiting, after a grace of their own, not with a second SIGTERM.
"""

from __future__ import annotations

import signal

HURRYING = signal.SIGINT
"""The one signal that, repeated, skips the grace period: Ctrl-C."""


def stops(first: int | None, signum: int) -> bool:
    """Whether signal ``signum`` to the controller stops it (an exception in its main
    thread); ``first``: the signal that already did, None while none has.

    Once one has, a SIGHUP or SIGTERM is dropped: the teardown it would ask for is
    under way, and an exception raised again wherever the main thread happens to be
    (a ``finally`` sending the hosts their teardown, or writing the summary) cut
    that short. A Ctrl-C always gets through (:func:`hurries`).
    """
    return first is None or signum == HURRYING


def hurries(signum: int | None) -> bool:
    """Whether a stop that comes during a teardown kills everything at once.

    ``signum``: the signal it came from (None: no signal, as a console that can no
    longer be written). Only a Ctrl-C does.
    """
    return signum == HURRYING
