"""The agent's teardown: one SIGTERM to each process of the job, SIGKILL after the grace.

Stdlib only, bundled into the agent after ``proctree``. "The job" is every
process below the agent (and, where the tree walk could miss one, every process
carrying its marker); signals go by PID and process group, never by name.

One SIGTERM each, because a second one re-enters a handler that is still
cleaning up (a checkpoint's save, cut short). Three senders once did it:

* a group leader got ``killpg`` and then ``kill``: the same process twice;
* torchrun, on its own SIGTERM, sends one to each worker's process group
  (``killpg``; torch before 2 signalled the worker alone), so the agent's
  own to a worker was the second. torchrun gets its SIGTERM from the agent
  and its workers get theirs from torchrun: their groups are left to it while
  it lives. If torchrun ends while a worker of its lives on, torchrun did not
  manage (it was killed, or never forwarded), and the agent signals that worker.

What is forked into a group after its SIGTERM went out is left to the process
that leads it (it is cleaning up); SIGKILL after ``--grace`` ends everything.

A host's ``setup:`` runs in the shell that then becomes the program (agent,
probe, jobctl, doctor): what it left running is below us, or, started away
from the tree (``setsid``, a daemon's double fork), marked by the
``CLUSTERLAUNCH_SETUP`` its wrapper exported (``core/setupguard.py``). Every
program ends it before it exits, with the same killer: the agent with its job,
the others (and an agent that started nothing) through
:meth:`TreeKiller.end_leftovers`.

torchrun has a deadline of its own: it SIGKILLs its workers 30 s after their
SIGTERM (its ``LaunchConfig.shutdown_timeout``, from ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``
in the torch this project pins; older torchruns have the 30 s built in), which
cut a ``--grace 90`` checkpoint short. The agent sets it past the grace, so the
agent's SIGKILL is the one that counts.
"""

import math
import os
import time

from clusterlaunch.remote.accel import devices_environ  # bundle: strip
from clusterlaunch.remote.proctree import (  # bundle: strip
    become_subreaper,  # bundle: strip
    children_of,  # bundle: strip
    descendants,  # bundle: strip
    kill_now,  # bundle: strip
    marked_processes,  # bundle: strip
    read_stat,  # bundle: strip
    reap,  # bundle: strip
    signal,  # bundle: strip
    tree_is_complete,  # bundle: strip
)  # bundle: strip

SHUTDOWN_VAR = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
SHUTDOWN_MARGIN_S = 5  # torchrun's own SIGKILL comes this long after the agent's
SETUP_VAR = "CLUSTERLAUNCH_SETUP"  # = core/setupguard.SETUP_VAR (not bundled): the setup's shell
LEFTOVER_GRACE_S = 2.0  # a setup's leftovers: SIGKILL this long after SIGTERM, as the watchdog's


def kill_if_no_workers(torchrun_pid):
    """SIGKILL a torchrun that has no workers left (the agent's teardown is under way).

    Such a torchrun waits in its exit barrier (up to 300 s) for the other
    nodes and ignores SIGTERM there; with no workers there is nothing left
    for it to shut down gracefully, so the grace period would only delay.
    """
    if not descendants(torchrun_pid):
        kill_now(torchrun_pid)


def job_environ(session, token, args, torchrun):
    """The job's environment: the session's, the agent's marker, for torchrun a shutdown
    deadline past ``args.grace`` (a user's own value too: ``--grace`` is the time between
    the signals), and for ``exec`` the variable of ``args.devices`` (``accel.py``)."""
    env = dict(session, CLUSTERLAUNCH_AGENT=token.partition("=")[2])
    env.pop(SETUP_VAR, None)  # the job is not the setup's
    if torchrun:
        env[SHUTDOWN_VAR] = str(math.ceil(args.grace) + SHUTDOWN_MARGIN_S)
    env.update(devices_environ(args.devices))
    return env


def setup_marker():
    """``CLUSTERLAUNCH_SETUP=PID.START`` if this very process is the shell that ran a setup.

    Its PID and start time, as the wrapper exported them (an exec keeps both);
    any other value came from elsewhere (a clusterlaunch started from inside a
    job with a setup) and marks processes that are not ours to end: None.
    """
    stat = read_stat(os.getpid())
    value = os.environ.get(SETUP_VAR)
    if stat is None or value != "%d.%d" % (os.getpid(), stat[3]):
        return None
    return "%s=%s" % (SETUP_VAR, value)


def ending_setup_leftovers(program, *args):
    """``program(*args)`` for a program without a job (probe, jobctl, doctor), then the end
    of what the host's setup left running (:meth:`TreeKiller.end_leftovers`): ours to end.
    Where a setup ran, the program becomes child subreaper, as the agent does."""
    killer = TreeKiller(os.getpid(), None, LEFTOVER_GRACE_S, setup=setup_marker())
    if killer.setup is not None:
        killer.tree_complete = tree_is_complete(become_subreaper())
    try:
        return program(*args)
    finally:
        killer.end_leftovers()


def signal_all(pids, signum):
    """Send ``signum`` to every pid and to the process groups they lead (SIGKILL: twice is
    harmless, and the group reaches members the walk missed)."""
    for pid in pids:
        info = read_stat(pid)
        if info is None:
            continue
        try:
            if info[2] == pid:
                os.killpg(pid, signum)
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            continue


def send_term(group, pid):
    """SIGTERM to process group ``group`` (a pid, when None: to process ``pid``)."""
    try:
        if group is not None:
            os.killpg(group, signal.SIGTERM)
        else:
            os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass


class TreeKiller:
    """SIGTERM → grace → SIGKILL for everything below the agent, by PID and group."""

    def __init__(self, root, marker, grace, keep=None, setup=None):
        self.root = root
        self.keep = keep
        self.marker = marker
        self.setup = setup
        """The setup's marker (:func:`setup_marker`): its leftovers may be anywhere."""
        self.tree_complete = False  # see tree_is_complete: then no marker sweep
        self.grace = grace
        self.started = None
        self.escalated = False
        self.termed = set()  # processes sent SIGTERM (or covered by their group's)
        self.groups = set()  # process groups sent SIGTERM
        self.forwarder = None
        """torchrun's PID, where the job is torchrun: it signals its workers itself."""
        self.trusted = set()  # the workers' groups (or, torch < 2, PIDs) left to it

    def targets(self, sweep=False):
        """Live processes of the job; ``sweep`` also scans /proc for the markers.

        The sweep is skipped where the tree is complete and no setup ran: it
        would scan every process on the host to find none the walk missed. What
        a setup detached left the tree before we were subreaper.
        """
        pids = set(descendants(self.root))
        if sweep and (self.setup or not self.tree_complete):
            pids.update(marked_processes(self.marker, self.setup))
        pids.discard(self.root)
        return sorted(pids)

    def start(self, force=False):
        """Begin teardown: SIGTERM now (SIGKILL at once when ``force``)."""
        if self.started is None:
            self.started = time.monotonic()
            self._term(self.targets(sweep=True))
        if force:
            self.escalate()

    def escalate(self):
        """SIGKILL whatever is left."""
        self.escalated = True
        signal_all(self.targets(sweep=True), signal.SIGKILL)

    def took(self):
        """Seconds since teardown began (0 if it never did), for the exit event."""
        return round(time.monotonic() - self.started, 3) if self.started else 0

    def step(self):
        """Advance teardown; True once nothing of the job is left alive."""
        reap(self.root, self.keep)
        left = self.targets()
        if not left:
            # The cheap tree walk says done: confirm with the marker sweep.
            left = self.targets(sweep=True)
            if not left:
                # Those that died since the reap above are ours (their parents died
                # first): collect them, so no zombie outlives the agent.
                reap(self.root, self.keep)
                return True
        if self.started is not None and time.monotonic() - self.started >= self.grace:
            signal_all(left, signal.SIGKILL)
            self.escalated = True
        else:
            self._term(left)
        return False

    def end_leftovers(self):
        """For a program that ends without a job: SIGTERM to everything below it and what
        its setup left, SIGKILL to what is left after at most :data:`LEFTOVER_GRACE_S`;
        returns once all of it is gone.

        Before, ``ps``, ``check`` and the rest left a setup's ``sleep 300 &`` running,
        and waited for it: it held the session's stderr, so the channel never ended.
        """
        self.grace = min(self.grace, LEFTOVER_GRACE_S)
        self.start()
        while not self.step():
            time.sleep(0.02)

    def _term(self, pids):
        """SIGTERM once to each of ``pids`` not yet covered: by group where one leads
        its group and no worker left to torchrun is in it, else by PID."""
        fresh = {}
        for pid in pids:
            info = read_stat(pid)
            if info is not None and pid not in self.termed and info[2] not in self.groups:
                fresh[pid] = info[2]
        self._trust_forwarder()
        theirs = {
            pid for pid, group in fresh.items() if pid in self.trusted or group in self.trusted
        }
        shared = {fresh[pid] for pid in theirs}  # torch < 2: workers in torchrun's group
        mine = {pid: group for pid, group in fresh.items() if pid not in theirs}
        leaders = {pid for pid, group in mine.items() if pid == group and group not in shared}
        for pid, group in mine.items():
            if group not in leaders:
                send_term(None, pid)
        for group in leaders:
            send_term(group, group)
        self.groups.update(leaders)
        self.termed.update(mine)

    def _trust_forwarder(self):
        """While torchrun lives, its workers are its to signal; once it has ended, a
        worker still alive did not get its SIGTERM from it (see the module)."""
        info = read_stat(self.forwarder) if self.forwarder is not None else None
        if info is not None and info[0] != "Z" and info[1] == self.root:
            for child in children_of(self.forwarder):
                self.trusted.add(child)  # its PID, and its group where it leads one
            return
        for pid in list(self.trusted):
            state = read_stat(pid)
            if state is not None and state[0] != "Z":
                self.trusted.discard(pid)
