"""The one way the remote programs listen: on every address, dual-stack, as torchrun's
store binds. Node 0's preflight listener (:mod:`.checks`: the agent's and the probe's)
and ``doctor``'s ephemeral port (:mod:`.doctor`) both open theirs here; the doctor
bundle had its own copy of this, which set no ``SO_REUSEADDR`` and left an IPv6 socket
it could not bind open.

Stdlib only, Python >= 3.8; bundled with the programs that use it (``BUNDLES``).
"""

BACKLOG = 128
"""Connections the kernel queues: every peer dials at once (the connection check, the
doctor's ``pairs``); the kernel caps it at ``net.core.somaxconn``."""


def open_listener(port):
    """A listener on ``port`` (0: one the kernel picks, as gloo and NCCL do), bound
    where torchrun's TCPStore would bind it.

    The store (libuv, ``LibUVStoreDaemon::init``) binds ``[::]`` dual-stack and, if
    that fails, ``0.0.0.0``; its clients dial every address ``master_addr`` resolves
    to. Bound by the master address's form instead, a name that resolves to IPv6
    alone was checked against an IPv4 listener, and every node failed with
    "Connection refused" where torchrun would have run.
    """
    import socket  # in the functions that need it: the agent bundles this module, and an
    # exec never gets here (socket: 7 ms of the agent's start, -X importtime)

    try:
        return _bound(socket.AF_INET6, "::", port)
    except OSError:  # no IPv6 here, or the port is taken: the store tries IPv4 next too
        return _bound(socket.AF_INET, "0.0.0.0", port)


def _bound(family, address, port):
    import socket

    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        # Bind exactly as the store will: with SO_REUSEADDR, so a port merely in
        # TIME_WAIT passes and one with a listener on it fails; dual-stack (libuv
        # clears IPV6_V6ONLY), so IPv4 diallers are answered too.
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind((address, port))
        listener.listen(BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener
