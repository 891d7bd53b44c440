"""The agent's side of the wire: framed output, and the arguments it is started with.

Stdlib only, bundled with the agent (see ``clusterlaunch.remote.BUNDLES``).
The frames are :mod:`clusterlaunch.core.protocol`'s (bundled before this
module); the controller's decoder is ``clusterlaunch/core/frames.py``.
"""

import errno
import itertools
import os
import select
import time

try:  # the C deque the collections module re-exports: that module's import cost every
    from _collections import deque  # agent ~1.5 ms of its start-up (python -S, 60 rounds)
except ImportError:  # an interpreter without it
    from collections import deque

from clusterlaunch.core.protocol import SYNC, encode_event, encode_frame  # bundle: strip

OUT_CAP = 8 << 20  # stop reading inputs while this much output is unsent
WRITEV_MAX = 64  # frames per write (the system's limit is 1024)


class Output:
    """Non-blocking framed writer on fd 1.

    Writes never block: a stalled channel (partition) must not stop the
    heartbeat check that tears the job down. A slow reader only makes the
    queue grow to ``OUT_CAP``; the agent then stops reading its inputs
    until the channel drains (backpressure), and never drops what it read.

    The queue holds whole frames, written with ``writev``. It was one bytearray,
    cut at the front and grown at the end: with a reader slower than the job (the
    usual case for bulk output), each growth copied up to 8 MiB, and a quarter of
    the agent's CPU for 10M lines was ``memmove`` (perf).
    """

    def __init__(self, fd=1):
        self.fd = fd
        self.queue = deque()  # whole frames, oldest first
        self.unsent = 0  # bytes queued and not yet written
        self.head_sent = 0  # bytes of queue[0] already written
        self.broken = False
        self.started = False

    def start(self):
        if not self.started:  # once: before the preflight's reports, or before the job
            self.started = True
            os.set_blocking(self.fd, False)
            self.put(SYNC)

    def frame(self, tag, data):
        if data and not self.broken:
            # One append: a frame is either wholly queued or not at all.
            self.put(encode_frame(tag, data))

    def event(self, **fields):
        if not self.broken:
            self.put(encode_event(fields))

    def put(self, piece):
        """Queue ``piece`` as it is (the sync marker, a whole frame)."""
        self.queue.append(piece)
        self.unsent += len(piece)

    def flush(self):
        while self.unsent and not self.broken:
            pieces = [memoryview(self.queue[0])[self.head_sent :]]
            pieces += itertools.islice(self.queue, 1, WRITEV_MAX)
            try:
                sent = os.writev(self.fd, pieces)
            except BlockingIOError:
                return
            except OSError as exc:  # EPIPE: the controller is gone
                if exc.errno != errno.EINTR:
                    self.broken = True
                    self.queue.clear()
                    self.unsent = self.head_sent = 0
                return
            self._sent(sent)

    def _sent(self, count):
        self.unsent -= count
        count += self.head_sent
        while self.queue and count >= len(self.queue[0]):
            count -= len(self.queue.popleft())
        self.head_sent = count

    def drain(self, timeout):
        """Best effort, for at most ``timeout`` s (when the controller is already lost)."""
        deadline = time.monotonic() + timeout
        while self.unsent and not self.broken and time.monotonic() < deadline:
            select.select([], [self.fd], [], max(0.0, deadline - time.monotonic()))
            self.flush()

    @property
    def full(self):
        return self.unsent > OUT_CAP


class Control:
    """The controller as the agent hears it: commands and heartbeats on stdin."""

    def __init__(self, heartbeat_timeout, fd=0):
        self.fd = fd
        self.open = True
        self.timeout = heartbeat_timeout
        self.started = self.last_heard = time.monotonic()
        self.early = bytearray()  # read with the preflight's lines: control bytes already

    def read(self):
        """The bytes that arrived; b"" once stdin has ended (the controller is gone)."""
        if self.early:
            data = bytes(self.early)
            self.early.clear()
        else:
            data = self._read()
        if data:
            self.last_heard = time.monotonic()
        return data

    def _read(self):
        try:
            data = os.read(self.fd, 4096)
        except OSError:
            data = b""
        if not data:
            self.open = False
        return data

    def read_line(self, deadline):
        """The preflight's next line on stdin (stripped); None on EOF or past ``deadline``."""
        while b"\n" not in self.early:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            data = self._read()
            if not data:
                return None
            self.early += data
        line, _, rest = bytes(self.early).partition(b"\n")
        self.early[:] = rest
        self.last_heard = time.monotonic()
        return line.decode("utf-8", "replace").strip()

    @property
    def silent(self):
        """No heartbeat (nor anything else) for longer than ``--heartbeat-timeout``."""
        return time.monotonic() - self.last_heard > self.timeout


class Args:
    """The agent's settings (written by clusterlaunch's planner, never by hand)."""

    def __init__(self):
        self.job_id = None
        self.node_rank = None
        self.nodes = None  # the job's node count, for its record (kill's table)
        self.grace = None  # required, like the heartbeat timeout: the planner
        self.heartbeat_timeout = None  # always passes both (core/defaults.py)
        self.first_rank = 0  # None: decided by the preflight ("AUTO"; gpus: auto), sent with the go
        self.rank_files = False  # torchrun's per-rank files, in the folder of the agent's claim
        self.since = None  # run: how long before the go its controller started (the go says)
        self.argv = []
        # The preflight (``run``): given a nonce, the agent checks its host and
        # waits for the controller's go (remote/gate.py) before it starts the job.
        self.nonce = None
        self.preflight_timeout = None
        self.master_addr = None
        self.listen = None
        self.timeout = None  # the connection check's (core/defaults.py), given with --nonce
        self.script = self.module = self.program = self.accelerator = None
        self.devices = None  # exec's devices: on a host without accelerator: (accel.py)
        self.need_torch = False


_OPTIONS = {
    "--job-id": ("job_id", str),
    "--node-rank": ("node_rank", int),
    "--nodes": ("nodes", int),
    "--grace": ("grace", float),
    "--heartbeat-timeout": ("heartbeat_timeout", float),
    "--first-rank": ("first_rank", lambda text: None if text == "AUTO" else int(text)),
    "--rank-files": ("rank_files", None),  # a flag: no value
    "--nonce": ("nonce", str),
    "--preflight-timeout": ("preflight_timeout", float),
    "--master-addr": ("master_addr", str),
    "--listen": ("listen", int),
    "--timeout": ("timeout", float),
    "--script": ("script", str),
    "--module": ("module", str),
    "--program": ("program", str),
    "--accelerator": ("accelerator", str),
    "--devices": ("devices", str),
    "--need-torch": ("need_torch", None),  # a flag: no value
}


def parse_args(argv):
    """``--name value`` pairs (the planner's ``_agent_argv``), ``--``, then the job's argv.

    Not argparse, measured with ``python -m benchmarks.agent_startup`` (Python
    3.11, ``python -S``, medians of 200 runs, machine otherwise idle): it would
    take 2.8 ms to import, 4.4 ms to build the parser (its help formatter
    imports shutil, and with it bz2 and lzma) and 0.2 ms to parse, against
    0.02 ms here: the agent's start-up would go from 65 to 72 ms (paired median
    +9 ms), on every host of every job. The events are JSON, written by the C
    encoder of json itself (``protocol.to_json``) without the json package.
    """
    if "--" not in argv:
        raise SystemExit("clusterlaunch-agent: no command given after --")
    split = argv.index("--")
    args = Args()
    args.argv = list(argv[split + 1 :])
    words = iter(argv[:split])
    for name in words:
        if name not in _OPTIONS:
            raise SystemExit("clusterlaunch-agent: unknown option %s" % name)
        attribute, kind = _OPTIONS[name]
        try:
            setattr(args, attribute, True if kind is None else kind(next(words)))
        except (StopIteration, ValueError):
            raise SystemExit("clusterlaunch-agent: bad value for %s" % name) from None
    if None in (args.job_id, args.node_rank, args.grace, args.heartbeat_timeout) or not args.argv:
        raise SystemExit(
            "clusterlaunch-agent: --job-id, --node-rank, --grace, --heartbeat-timeout "
            "and a command are required"
        )
    if args.nonce is not None and None in (args.preflight_timeout, args.master_addr, args.timeout):
        raise SystemExit(
            "clusterlaunch-agent: --nonce needs --preflight-timeout, --master-addr and --timeout"
        )
    return args
