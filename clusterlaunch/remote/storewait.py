"""Other nodes' torchrun dials node 0's store only once it listens.

Stdlib only, bundled with the agent. In a static rendezvous node 0's torchrun
opens the TCPStore and every other node's torchrun dials it. They all import
torch at the same time, so a node often dials a moment before node 0 listens,
and torch's client then waits out a growing back-off before it tries again
(``SocketConnectOp`` in c10d's socket.cpp). Measured here with torch 2.13,
a server up 0.05 / 0.2 / 0.5 / 1.0 s after the client's first try was joined
at 0.39 / 0.33 / 1.30 / 2.10 s: up to a second of every node's start lost, and
on many nodes some node always loses the race.

So on a node other than 0 the agent starts torchrun through the program
:func:`program` writes (``python -c``, same arguments): it imports torchrun
(the heavy part, in parallel with node 0), then dials the master address and
port every 20 ms (a refused dial costs node 0 one RST) until something accepts,
closes that connection (the store drops a client that sent nothing, without
a word: tested), and only then runs torchrun as ``-m`` does, whose own dial
is answered at once. After :data:`WAIT_S` seconds without an answer
it starts torchrun anyway: torch's own timeout and message then apply. The
command the plan shows (``--dry-run``) and the job record keep
``-m torch.distributed.run``.
"""

WAIT_S = 60
"""How long a node waits for node 0's store before leaving it to torch's back-off."""

PROBES_PER_S = 12800
"""What the whole job's waiting nodes dial node 0 at, at most (50 a node up to 256 nodes)."""

MARK = "# clusterlaunch: torchrun, once node 0's store listens"
"""The program's first line: what ``ps`` on the host shows first."""

_PROGRAM = """\
%s
import runpy, socket, sys, time
try:  # torch's import, in parallel with node 0's (torchrun's own module runs below)
    import torch.distributed.launcher.api
except ImportError:
    pass
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


def program(wait_s=WAIT_S):
    """torchrun, run as ``-m`` runs it, once node 0's store answers (or ``wait_s`` passed).

    As ``-m`` runs it, not by calling its ``main``: as ``__main__`` its log
    lines go out plain; as ``torch.distributed.run`` torch's logging prefixed
    each (``W1128 01:32:08.096000 22175 torch/distributed/run.py:874]``), and
    the controller no longer knew torchrun's banner (a cluster test caught it).
    """
    return _PROGRAM % (MARK, PROBES_PER_S, wait_s)


_TORCHRUN = ["-m", "torch.distributed.run"]


def is_torchrun(argv):
    """Whether the command line ``argv`` (bytes, as /proc gives it) is torchrun, as
    node 0 starts it (``-m torch.distributed.run``, or ``torchrun``) or the others do."""
    if b"torch.distributed.run" in argv or any(w.endswith(b"/torchrun") for w in argv[:2]):
        return True
    return argv[1:2] == [b"-c"] and argv[2:3] != [] and argv[2].startswith(MARK.encode())


def store_waiting(argv):
    """``argv`` to start: torchrun through :func:`program` on a node other than 0."""
    if argv[1:3] != _TORCHRUN or "--node-rank" not in argv:
        return argv
    if argv[argv.index("--node-rank") + 1] == "0":
        return argv
    return [argv[0], "-c", program(), *argv[3:]]
