"""The protocol channel of a remote program, out of reach of any code but its own.

Stdlib only, Python >= 3.8; bundled into the agent and the probe. The
controller reads frames (:mod:`clusterlaunch.core.protocol`) from the program's
stdout. Code that is not ours runs in the same interpreter before the job
starts: ``site.main()`` (a ``sitecustomize.py``, ``.pth`` files), a finder on
``sys.meta_path``. A ``print`` from any of it on fd 1, between two frames, made
the controller read garbage as a frame header: a job that succeeded was
reported as a lost host (255), and ``check -m`` failed with ``garbled probe
output``. So the program's first act moves the channel to a descriptor of its
own, and fd 1 (and with it ``sys.stdout``) writes to stderr, which the
controller shows as the host's own output.
"""

import os


def take_channel():
    """The channel (fd 1 as the program found it) on a private descriptor; fd 1 becomes stderr.

    The private descriptor is close-on-exec (``os.dup`` makes it so), so no child
    of the program inherits it either.
    """
    channel = os.dup(1)
    os.dup2(2, 1)
    return channel


def write_all(fd, data):
    """Write all of ``data`` to the blocking descriptor ``fd`` (a write may take less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
