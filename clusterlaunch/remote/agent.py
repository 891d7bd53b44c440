"""The per-host agent: runs one node's job, streams it, and takes it down with the channel.

Shipped as source over the SSH channel's stdin and run by the host's Python
(stdlib only, Python >= 3.8). It

* starts the job (torchrun, or a plain command for ``clusterlaunch exec``) in a
  session of its own and becomes child subreaper, so the whole tree stays ours;
* forwards the job's output as frames on stdout: torchrun's own streams and,
  byte for byte, each worker's stdout/stderr file (torchrun ``--redirects 3``),
  tagged with the global rank;
* reads its stdin for control: ``h`` heartbeat, ``t`` graceful teardown, ``k``
  kill now; EOF (controller gone, connection dropped) or no heartbeat for
  ``--heartbeat-timeout`` seconds also tear the job down;
* on teardown sends SIGTERM to every process of the job (by PID and process
  group, never by name), SIGKILL after ``--grace`` seconds, and reports.

Frame format: ``TAG SIZE\\n`` then SIZE bytes. Tags: ``o<rank>``/``e<rank>``
worker stdout/stderr, ``O``/``E`` the job's own stdout/stderr, ``J`` a JSON event.
"""

import os
import select
import signal
import subprocess
import sys
import time

from clusterlaunch.remote.proctree import (  # bundle: strip
    TreeKiller,  # bundle: strip
    WorkerWatch,  # bundle: strip
    become_subreaper,  # bundle: strip
    descendants,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.records import JobRecord, hostname, live_records  # bundle: strip
from clusterlaunch.remote.rootcause import (  # bundle: strip
    parse_root_cause,  # bundle: strip
    root_cause_complete,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.tail import RankTail  # bundle: strip
from clusterlaunch.remote.wire import Output, exit_status, parse_args  # bundle: strip

PR_SET_PDEATHSIG = 1
CHUNK = 1 << 18


class Agent:
    """One node's job from start to the last process gone."""

    def __init__(self, args):
        self.args = args
        self.out = Output()
        self.token = "CLUSTERLAUNCH_AGENT=%d.%d" % (os.getpid(), int(time.time() * 1e6))
        self.killer = TreeKiller(os.getpid(), self.token, args.grace)
        self.tail = RankTail(args.tail_dir, args.first_rank) if args.tail_dir else None
        self.watch = WorkerWatch()
        self.job = None
        self.job_err_tail = bytearray()
        self.reason = None
        self.last_heartbeat = time.monotonic()
        self.wake_r, self.wake_w = os.pipe()
        self.stdin_open = True
        self.record = None
        self.forced_code = None  # set when we end a torchrun that already failed

    # -- start ----------------------------------------------------------------
    def start(self):
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, self._on_signal)
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        subreaper = become_subreaper()
        self.out.start()
        if self.args.tail_dir:
            try:
                os.mkdir(self.args.tail_dir, 0o700)
            except OSError as exc:
                return self._fail_start("cannot create %s: %s" % (self.args.tail_dir, exc))
        env = dict(os.environ)
        key, _, value = self.token.partition("=")
        env[key] = value
        try:
            self.job = subprocess.Popen(
                self.args.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=env,
                preexec_fn=_term_when_parent_dies_of(os.getpid()),
            )
        except OSError as exc:
            return self._fail_start("cannot start %s: %s" % (self.args.argv[0], exc))
        for stream in (self.job.stdout, self.job.stderr):
            os.set_blocking(stream.fileno(), False)
        self.killer.keep = self.job.pid
        self.record = JobRecord.create(self.args, self.job.pid)
        self.out.event(
            event="started",
            pid=self.job.pid,
            agent_pid=os.getpid(),
            hostname=hostname(),
            subreaper=subreaper,
        )
        return True

    def _fail_start(self, message):
        self.out.event(event="exit", reason="start-failed", code=127, message=message)
        self.reason = "start-failed"
        return False

    def _on_signal(self, signum, frame):
        if signum == signal.SIGUSR1:
            self.begin_teardown("killed")  # clusterlaunch kill
        elif self.reason is not None and self.killer.started is not None:
            self.killer.escalate()  # a second signal: no more grace
        else:
            self.begin_teardown("signal %d" % signum)

    # -- the loop ---------------------------------------------------------------
    def run(self):
        """Pump until the job and everything it started are gone; return the exit code."""
        if not self.start():
            self.out.drain(2.0)
            return 127
        code = None
        while True:
            busy = self.pump()
            if code is None and self.job.poll() is not None:
                code = self.job.returncode if self.forced_code is None else self.forced_code
                self.drain_job_pipes()
                if self.reason is None:
                    self.reason = "exited"
                self.killer.start()  # leftovers (daemons, orphaned workers)
            if code is not None or self.killer.started is not None:
                self.unstick_exit_barrier(code)
                if self.killer.step() and code is not None:
                    break
            self.check_heartbeat()
            self.wait(0 if busy else 0.05)
        return self.finish(code)

    def pump(self):
        """Move available output into frames; True if anything moved."""
        moved = False
        if not self.out.full:
            moved = self.read_job_pipes() or moved
            if self.tail is not None:
                for tag, data in self.tail.poll(CHUNK):
                    self.out.frame(tag, data)
                    moved = True
        if self.tail is not None and self.job is not None and self.job.poll() is None:
            self.watch.poll(self.job.pid)
        self.out.flush()
        return moved

    def read_job_pipes(self):
        moved = False
        for tag, stream in ((b"O", self.job.stdout), (b"E", self.job.stderr)):
            if stream.closed:
                continue
            try:
                data = os.read(stream.fileno(), CHUNK)
            except BlockingIOError:
                continue
            if not data:
                stream.close()
                continue
            if tag == b"E":
                self.job_err_tail = (self.job_err_tail + data)[-65536:]
                self.end_failed_torchrun()
            self.out.frame(tag, data)
            moved = True
        return moved

    def drain_job_pipes(self):
        deadline = time.monotonic() + 2.0
        while not (self.job.stdout.closed and self.job.stderr.closed):
            if not self.read_job_pipes() and time.monotonic() > deadline:
                break  # a daemon still holds the pipe open; teardown ends it
            self.out.flush()

    def wait(self, timeout):
        readers = [self.wake_r] + ([0] if self.stdin_open else [])
        for stream in (self.job.stdout, self.job.stderr):
            if not stream.closed and not self.out.full:
                readers.append(stream.fileno())
        writers = [1] if self.out.pending and not self.out.broken else []
        try:
            ready, _, _ = select.select(readers, writers, [], timeout)
        except InterruptedError:
            return
        if self.wake_r in ready:
            os.read(self.wake_r, 512)
        if 0 in ready:
            self.read_control()

    def read_control(self):
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:
            self.stdin_open = False
            self.begin_teardown("eof")  # controller gone or channel closed
            return
        self.last_heartbeat = time.monotonic()
        if b"k" in data:
            self.begin_teardown("requested", force=True)
        elif b"t" in data:
            self.begin_teardown("requested")

    def end_failed_torchrun(self):
        """Once torchrun has printed its root-cause block, end it at once.

        By then it has closed its workers; what is left is 0.7-1.4 s of
        interpreter shutdown (measured) before it exits, all of which the
        other hosts would otherwise spend still running. Its exit code is 1
        whatever we do, and the block says which rank failed and how.
        """
        if self.tail is None or self.forced_code is not None or self.reason is not None:
            return
        text = bytes(self.job_err_tail[-16384:]).decode("utf-8", "replace")
        if not root_cause_complete(text) or descendants(self.job.pid):
            return
        self.forced_code = 1
        try:
            os.kill(self.job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def unstick_exit_barrier(self, code):
        """SIGKILL a torchrun that has no workers left once teardown is under way.

        Such a torchrun waits in its exit barrier (up to 300 s) for the other
        nodes and ignores SIGTERM there; with no workers there is nothing left
        for it to shut down gracefully, so the grace period would only delay.
        """
        if self.tail is None or code is not None or self.killer.escalated:
            return
        if not descendants(self.job.pid):
            try:
                os.kill(self.job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def check_heartbeat(self):
        if self.killer.started is None:
            silent = time.monotonic() - self.last_heartbeat
            if silent > self.args.heartbeat_timeout:
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
        self.pump_until_quiet()
        root = parse_root_cause(bytes(self.job_err_tail).decode("utf-8", "replace"))
        if root is not None and root.get("pid") in self.watch.died_at:
            root["failed_at"] = self.watch.died_at[root["pid"]]
        self.out.event(
            event="exit",
            reason=self.reason,
            code=code,
            root_cause=root,
            escalated=self.killer.escalated,
            teardown_s=(
                round(time.monotonic() - self.killer.started, 3) if self.killer.started else 0
            ),
        )
        if self.tail is not None:
            self.tail.remove()
        if self.record is not None:
            self.record.remove()
        live_records()  # and clean up after agents that died without doing so
        self.out.drain(5.0)
        return exit_status(code)

    def pump_until_quiet(self):
        # Workers are gone: their files hold all they will ever write. Bounded,
        # in case a stray writer we could not kill keeps appending.
        deadline = time.monotonic() + 10.0
        while self.pump() and time.monotonic() < deadline:
            self.out.drain(1.0)


def _term_when_parent_dies_of(agent_pid):
    return lambda: term_when_parent_dies(agent_pid)


def term_when_parent_dies(agent_pid):
    """In the job's process, before exec: SIGTERM it if the agent dies.

    The one case the agent cannot handle is its own SIGKILL; then torchrun at
    least gets SIGTERM, which it forwards to its workers before exiting.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != agent_pid:  # the agent died before prctl took effect
        os._exit(143)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    code = Agent(args).run()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
