"""Other nodes' torchrun dials node 0's store only once it listens, and only if it is ours.

Stdlib only, bundled with the agent. In a static rendezvous node 0's torchrun
opens the TCPStore and every other node's torchrun dials it. They all import
torch at the same time, so a node often dials a moment before node 0 listens,
and torch's client then waits out a growing back-off before it tries again
(``SocketConnectOp`` in c10d's socket.cpp). Measured here with torch 2.13,
a server up 0.05 / 0.2 / 0.5 / 1.0 s after the client's first try was joined
at 0.39 / 0.33 / 1.30 / 2.10 s: up to a second of every node's start lost, and
on many nodes some node always loses the race.

And the port is only ours while someone holds it. Node 0's agent holds its
preflight listener until the instant before it starts torchrun
(``remote/gate.py``), but torchrun then imports torch for a second or more
before its store binds the port: anything that binds it meanwhile (a process
waiting for the port, another job with the same fixed port started at the same
moment) wins, node 0's torchrun dies of ``EADDRINUSE``, and a node that dialled
the port would have joined whatever holds it: another job's store, or worse.

So on node 0 the agent watches (:class:`StoreOwner`) until a socket listening
on the master port is one of its own torchrun's (``/proc/net/tcp``, ``tcp6``,
and the job's ``/proc/PID/fd``), then says so (the ``store`` event); the
controller tells every other agent (``s`` on its stdin). On those nodes the
agent starts torchrun through the program :func:`program` writes (``python
-c``, same arguments, :class:`StoreWait`): it imports torchrun (the heavy
part, in parallel with node 0), reads one byte from a pipe the agent writes
to on ``s`` (end of file: the agent is gone, nothing starts), dials the master
address and port every 20 ms until something accepts, closes that connection
(the store drops a client that sent nothing, without a word: tested), and
only then runs torchrun as ``-m`` does, whose own dial is answered at once.
The dial is answered at once too, unless node 0's ``/proc`` could not tell
(then the release comes once its torchrun has a socket, and the dial waits as
before); after :data:`WAIT_S` seconds without an answer it starts torchrun
anyway: torch's own timeout and message then apply. The command the plan
shows (``--dry-run``) and the job record keep ``-m torch.distributed.run``.
"""

import os

from clusterlaunch.remote.proctree import descendants  # bundle: strip

WAIT_S = 60
"""How long a released node waits for node 0's store before leaving it to torch's back-off."""

PROBES_PER_S = 12800
"""What the whole job's waiting nodes dial node 0 at, at most (50 a node up to 256 nodes)."""

WATCH_S = 0.005
"""How often node 0's agent looks for its torchrun's store while it starts: every wait
the others do for it (and the release's trip through the controller) is added to the job."""

MARK = "# clusterlaunch: torchrun, once node 0's store listens"
"""The program's first line: what ``ps`` on the host shows first."""

_PROGRAM = """\
%s
import os, runpy, socket, sys, time
try:  # torch's import, in parallel with node 0's (torchrun's own module runs below)
    import torch.distributed.launcher.api
except ImportError:
    pass
released = os.read(%d, 1)  # node 0's agent saw its own torchrun listen (b"": the agent is gone)
os.close(%d)
if not released:
    sys.exit(1)
def value(flag):
    return sys.argv[sys.argv.index(flag) + 1]
addr, port = value("--master-addr"), int(value("--master-port"))
step = max(0.02, int(value("--nnodes")) / %d.0)
end = time.monotonic() + %r
while time.monotonic() < end:
    try:
        socket.create_connection((addr, port), 1).close()
        break
    except OSError:
        time.sleep(step)
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
"""


def program(release_fd, wait_s=WAIT_S):
    """torchrun, run as ``-m`` runs it, once a byte on ``release_fd`` and node 0's store
    answers (or ``wait_s`` passed).

    As ``-m`` runs it, not by calling its ``main``: as ``__main__`` its log
    lines go out plain; as ``torch.distributed.run`` torch's logging prefixed
    each (``W1128 01:32:08.096000 22175 torch/distributed/run.py:874]``), and
    the controller no longer knew torchrun's banner (a cluster test caught it).
    """
    return _PROGRAM % (MARK, release_fd, release_fd, PROBES_PER_S, wait_s)


_TORCHRUN = ["-m", "torch.distributed.run"]


def is_torchrun(argv):
    """Whether the command line ``argv`` (bytes, as /proc gives it) is torchrun, as
    node 0 starts it (``-m torch.distributed.run``, or ``torchrun``) or the others do."""
    if b"torch.distributed.run" in argv or any(w.endswith(b"/torchrun") for w in argv[:2]):
        return True
    return argv[1:2] == [b"-c"] and argv[2:3] != [] and argv[2].startswith(MARK.encode())


def store_gate(argv, torchrun):
    """How this node starts ``argv`` (``torchrun``: a torchrun job, as the plan starts it):
    node 0 watches for its store (:class:`StoreOwner`), the others wait for it
    (:class:`StoreWait`); a job of one node, or not torchrun, starts as it is."""
    rank, port = _value(argv, "--node-rank"), _value(argv, "--master-port")
    if not torchrun or argv[1:3] != _TORCHRUN or rank is None or not (port or "").isdigit():
        return NoGate(argv)
    if _value(argv, "--nnodes") == "1":  # no other node
        return NoGate(argv)
    return StoreOwner(argv, int(port)) if rank == "0" else StoreWait(argv)


def _value(argv, flag):
    """The value of torchrun's option ``flag`` (its first, before the script's), or None."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


class NoGate:
    """A job that starts as it is, with nothing to watch for or wait on."""

    def __init__(self, argv):
        self.argv = argv
        self.pass_fds = ()
        """Descriptors the job inherits (the agent closes its own copies once it started)."""

    def watch(self, job_pid, out):
        """Node 0: the ``store`` event on ``out`` once ``job_pid``'s tree listens on the port."""

    def release(self):
        """The controller's ``s``: node 0's own torchrun listens."""

    def idle_s(self, default):
        """How long the agent's loop may sleep when nothing happens."""
        return default


class StoreOwner(NoGate):
    """Node 0: tells once a socket of its torchrun's tree listens on the master port."""

    def __init__(self, argv, port):
        NoGate.__init__(self, argv)
        self.port = port
        self.watching = True

    def watch(self, job_pid, out):
        if self.watching and self.listens(job_pid):
            self.watching = False
            out.event(event="store")

    def listens(self, job_pid):
        """Whether a socket of ``job_pid``'s tree listens on the port (or /proc cannot tell)."""
        ours = socket_inodes([job_pid, *descendants(job_pid)])
        if not ours:  # still importing torch: nothing more to read
            return False
        listening = listening_inodes(self.port)
        return listening is None or bool(listening & ours)  # else: someone else's, or not yet

    def idle_s(self, default):
        return min(default, WATCH_S) if self.watching else default


class StoreWait(NoGate):
    """A node other than 0: torchrun through :func:`program`, released on the agent's ``s``."""

    def __init__(self, argv):
        read, self.write = os.pipe()  # both close-on-exec: the job's copy is made inheritable
        NoGate.__init__(self, [argv[0], "-c", program(read), *argv[3:]])
        self.pass_fds = (read,)

    def release(self):
        if self.write is None:
            return
        try:
            os.write(self.write, b"s")
        except OSError:  # the program is gone already (EPIPE: the agent ignores SIGPIPE)
            pass
        os.close(self.write)
        self.write = None


def socket_inodes(pids):
    """The inodes of every socket the processes ``pids`` hold open (as ``/proc`` names them)."""
    found = set()
    for pid in pids:
        folder = "/proc/%d/fd/" % pid
        try:
            names = os.listdir(folder)
        except OSError:  # gone, or not ours to read
            continue
        for name in names:
            try:
                target = os.readlink(folder + name)
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    return found


def listening_inodes(port):
    """The inodes of the TCP sockets (IPv4 and IPv6) listening on ``port``; None when this
    host's ``/proc`` cannot tell."""
    found, told = set(), False
    suffix = (":%04X" % port).encode()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, "rb") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        told = True
        for row in rows:  # sl local_address rem_address st ... uid timeout inode
            fields = row.split()
            if len(fields) > 9 and fields[3] == b"0A" and fields[1].endswith(suffix):
                found.add(fields[9].decode())  # 0A: TCP_LISTEN
    return found if told else None
