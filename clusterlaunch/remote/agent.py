"""The per-host agent: runs one node's job, streams it, and takes it down with the channel.

Shipped over the SSH channel's stdin, run by the host's Python (stdlib, >= 3.8). It

* for ``run`` (given ``--nonce``), first checks its host as the preflight
  probe would and starts nothing until the controller's go (``remote/gate.py``);
* starts the job (torchrun, or a plain command for ``clusterlaunch exec``) in a
  session of its own and becomes child subreaper, so the whole tree stays ours;
* forwards the job's output as frames on its stdout, moved first out of reach (``channel.py``):
  torchrun's streams and, byte for byte, each worker's file (``--redirects 3``) by rank;
* reads its stdin for control: ``h`` heartbeat, ``t`` graceful teardown, ``k`` kill
  now; EOF (controller gone) or no heartbeat for ``--heartbeat-timeout`` s also do;
* on teardown sends SIGTERM once to every process of the job (by PID and group,
  never by name; torchrun's workers get it from torchrun: ``remote/teardown.py``),
  SIGKILL after ``--grace`` seconds, and reports;
* once the job's last process is gone, reads its pipes and rank files to the end
  and sends it all before the ``exit`` event: a slow controller slows this down,
  only a lost one (stdin EOF, broken stdout, no heartbeat) or a second signal cuts
  it short. Signal handlers only record the signal (SIGCHLD's: nothing).
"""

import os
import select
import sys
import time

from clusterlaunch.core.exits import ExitStatus, shell_status  # bundle: strip
from clusterlaunch.core.protocol import JOB_STDERR  # bundle: strip
from clusterlaunch.remote.channel import take_channel  # bundle: strip
from clusterlaunch.remote.claims import live_claims  # bundle: strip
from clusterlaunch.remote.gate import checked_and_go, claimed_start, take_claim  # bundle: strip
from clusterlaunch.remote.proctree import (  # bundle: strip
    WorkerWatch,  # bundle: strip
    become_subreaper,  # bundle: strip
    route_signals,  # bundle: strip
    signal,  # bundle: strip
    tree_is_complete,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.recordfiles import clean_up_after_dead_agents  # bundle: strip
from clusterlaunch.remote.records import JobRecord, hostname  # bundle: strip
from clusterlaunch.remote.rootcause import kill_failed_torchrun, parse_root_cause  # bundle: strip
from clusterlaunch.remote.spawn import session_environ, start_failure, start_job  # bundle: strip
from clusterlaunch.remote.storewait import NoGate, store_gate  # bundle: strip
from clusterlaunch.remote.tail import JobPipes, RankTail, with_log_dir  # bundle: strip
from clusterlaunch.remote.teardown import (  # bundle: strip
    TreeKiller,  # bundle: strip
    job_environ,  # bundle: strip
    kill_if_no_workers,  # bundle: strip
    setup_marker,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.wire import Control, Output, parse_args  # bundle: strip

CHUNK = 1 << 18


class Agent:
    """One node's job from start to the last process gone."""

    def __init__(self, args, channel):
        self.args = args
        self.out = Output(channel)
        self.token = "CLUSTERLAUNCH_AGENT=%d.%d" % (os.getpid(), int(time.time() * 1e6))
        self.killer = TreeKiller(os.getpid(), self.token, args.grace, setup=setup_marker())
        self.tail = None  # the rank files, from start(): the first rank may come with the go
        self.watch = WorkerWatch()
        self.job = None
        self.store = NoGate(args.argv)  # how torchrun starts: from start()
        self.pipes = None
        self.signals = []  # recorded by the handler, acted on by the loop
        self.hurry = False  # told twice to stop: no more grace, no more waiting
        self.reason = None
        self.control = Control(args.heartbeat_timeout)
        self.wake_r, self.wake_w = os.pipe()
        self.record = None
        self.claim = None  # the job id's, on this host: remote/claims.py
        self.forced_code = None  # set when we end a torchrun that already failed

    # -- start ----------------------------------------------------------------
    def start(self, held):
        route_signals(self._on_signal, self.wake_w)
        subreaper = become_subreaper()
        self.killer.tree_complete = tree_is_complete(subreaper)
        self.out.start()
        killed = signal.SIGUSR1 in self.signals  # a kill found its claim already
        self.claim, tail_dir, self.reason = claimed_start(self.args, self.claim, self.out, killed)
        if self.reason is not None:
            return False
        argv = self.args.argv
        if tail_dir is not None:
            self.tail = RankTail(tail_dir, self.args.first_rank)
            argv = with_log_dir(argv, tail_dir)
        env = job_environ(session_environ(), self.token, self.args, self.tail is not None)
        self.store = store_gate(argv, torchrun=self.tail is not None)
        held.stop()  # node 0's master port, held to this instant: now whoever binds it has it
        try:
            self.job = start_job(self.store.argv, env, self.store.pass_fds)
        except OSError as exc:  # StartFailed: the status a shell gives, 126 or 127; a limit: 2
            return self._fail_start(exc)
        self.pipes = JobPipes(self.job.stdout, self.job.stderr)
        self.killer.keep = self.job.pid
        self.killer.forwarder = self.job.pid if self.tail is not None else None  # torchrun's
        self.record = JobRecord.create(self.args, self.job.pid, self.tail and self.tail.root)
        self.out.event(
            event="started",
            pid=self.job.pid,
            agent_pid=os.getpid(),
            hostname=hostname(),
            subreaper=subreaper,
        )
        return True

    def _fail_start(self, error):
        self.reason, (code, why) = "start-failed", start_failure(self.args.argv[0], error)
        self.out.event(event="exit", reason=self.reason, code=code, message=why)
        return False

    def _on_signal(self, signum, frame):
        self.signals.append(signum)  # only recorded: see handle_signals

    def handle_signals(self):
        while self.signals:
            signum = self.signals.pop(0)
            if signum == signal.SIGUSR1:
                self.begin_teardown("killed")  # clusterlaunch kill
            elif self.reason is not None and self.killer.started is not None:
                self.hurry = True  # a second signal: no more grace
                self.killer.escalate()
            else:
                self.begin_teardown("signal %d" % signum)

    # -- the loop ---------------------------------------------------------------
    def run(self):
        """Pump until the job and everything it started are gone; return the exit code."""
        self.out.start()
        # kill may find our claim before the job starts: SIGUSR1 recorded (by default it ends us)
        signal.signal(signal.SIGUSR1, self._on_signal)
        clash = {}
        if self.args.nonce is not None:  # run: claimed before the checks, which report a clash
            self.claim, clash = take_claim(self.args)
        held = checked_and_go(self.args, self.out, self.control, clash)
        if held is None or not self.start(held):  # no go (the controller said no, or left), no job
            self.deliver()
            self.killer.end_leftovers()  # the setup's: nothing ends them after us
            if self.claim is not None:
                self.claim.remove()
            return ExitStatus.NOT_STARTED
        code = None
        while True:
            busy = self.pump()
            if code is None and self.job.poll() is not None:
                code = self.job.returncode if self.forced_code is None else self.forced_code
                if self.reason is None:
                    self.reason = "exited"
                self.killer.start()  # leftovers (daemons, orphaned workers)
            if code is not None or self.killer.started is not None:
                self.unstick_exit_barrier(code)
                if self.killer.step() and code is not None:
                    break
            self.check_heartbeat()
            self.wait(0 if busy else self.store.idle_s(0.05))
        return self.finish(code)

    def pump(self):
        """Move available output into frames; True if anything moved."""
        moved = False
        if not self.out.full:
            moved = self.read_inputs(final=False)
        if self.tail is not None and self.job is not None and self.job.poll() is None:
            self.watch.poll(self.job.pid)
            self.store.watch(self.job.pid, self.out)  # node 0: says when its own torchrun listens
        self.out.flush()
        return moved

    def read_inputs(self, final):
        """Frame one chunk of each pipe and rank file; True if anything moved."""
        chunks = self.pipes.read(CHUNK, final)
        if self.tail is not None:
            chunks += self.tail.poll(CHUNK)
        for tag, data in chunks:
            self.out.frame(tag, data)
            if tag == JOB_STDERR:
                self.end_failed_torchrun()
        return bool(chunks)

    def wait(self, timeout):
        readers = [self.wake_r] + ([self.control.fd] if self.control.open else [])
        if self.pipes is not None and not self.out.full:
            readers += self.pipes.fds()
        writers = [self.out.fd] if self.out.unsent and not self.out.broken else []
        try:
            ready, _, _ = select.select(readers, writers, [], timeout)
        except InterruptedError:
            ready = []
        if self.wake_r in ready:
            os.read(self.wake_r, 512)
        if self.control.fd in ready or self.control.early:  # early: came with the go's line
            self.read_control()
        self.handle_signals()

    def read_control(self):
        data = self.control.read()
        if b"s" in data:  # node 0's own torchrun listens on the master port
            self.store.release()
        if not data:
            self.begin_teardown("eof")  # controller gone or channel closed
        elif b"k" in data:
            self.begin_teardown("requested", force=True)
        elif b"t" in data:
            self.begin_teardown("requested")

    def end_failed_torchrun(self):
        """Once torchrun has printed its root cause, end it at once (rootcause.py: why)."""
        if self.tail is None or self.forced_code is not None or self.reason is not None:
            return
        if kill_failed_torchrun(self.job.pid, self.pipes.err_tail):
            self.forced_code = 1

    def unstick_exit_barrier(self, code):
        """In teardown, SIGKILL a torchrun with no workers left (teardown.py: why)."""
        if self.tail is None or code is not None or self.killer.escalated:
            return
        kill_if_no_workers(self.job.pid)

    def check_heartbeat(self):
        if self.killer.started is None and self.control.silent:
            self.begin_teardown("controller-lost")

    def begin_teardown(self, reason, force=False):
        if self.reason is None:
            self.reason = reason
            # Said before torchrun starts printing its shutdown tracebacks, so
            # the controller can keep those off the console.
            self.out.event(event="stopping", reason=reason)
        self.killer.start(force=force)

    # -- end ------------------------------------------------------------------
    def finish(self, code):
        self.read_to_end(failed=bool(code))
        root = parse_root_cause(bytes(self.pipes.err_tail).decode("utf-8", "replace"))
        if root is not None and root.get("pid") in self.watch.died_at:
            root["failed_at"] = self.watch.died_at[root["pid"]]
        self.out.event(
            event="exit",
            reason=self.reason,
            code=code,
            root_cause=root,
            escalated=self.killer.escalated,
            teardown_s=self.killer.took(),
        )
        # The files (read to the end above: nothing unsent is lost), the record, the claim.
        for trace in (self.tail, self.record, self.claim):
            if trace is not None:
                trace.remove()
        clean_up_after_dead_agents()  # that could not do it themselves
        live_claims()  # and their claims, files and all
        self.deliver()
        return shell_status(code)

    def read_to_end(self, failed=False):
        """Send every byte the job wrote: its processes are gone, so all of it is there now.

        Not bounded in time: a slow controller makes it wait (8 MiB cap), never drops it.
        """
        if self.tail is not None:
            self.tail.freeze(failed)  # failed: for want of disk space? (tail.py says)
        while not self.controller_gone():
            if not self.out.full:
                moved = self.read_inputs(final=True)
                if not moved and self.pipes.closed and (self.tail is None or self.tail.done):
                    break
            self.out.flush()
            self.wait(0.05 if self.out.full else 0)

    def deliver(self):
        """Write out everything queued, however long the controller takes to read it."""
        while self.out.unsent and not self.controller_gone():
            self.out.flush()
            if self.out.unsent:
                self.wait(0.05)
        if self.out.unsent:
            self.out.drain(1.0)  # the controller is gone: best effort, bounded

    def controller_gone(self):
        """Nobody will read the rest (stdin ended, stdout broke, silence), or told twice to stop."""
        return not self.control.open or self.out.broken or self.hurry or self.control.silent


def main(argv=None):
    channel = take_channel()  # first: before site.main(), a -m search or the job
    args = parse_args(sys.argv[1:] if argv is None else argv)
    code = Agent(args, channel).run()
    sys.stdout.flush()  # fd 1 is stderr now: what user code printed
    os._exit(code)


if __name__ == "__main__":
    main()
