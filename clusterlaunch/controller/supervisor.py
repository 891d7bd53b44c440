"""Run a planned job on every host: start, stream, fail fast, tear down.

One thread does everything that decides (select over every host's channel,
route output, judge endings); a second only sends heartbeats, so a console
that blocks (``| less``) never starves the agents into tearing down. Teardown
runs from ``finally`` and is idempotent: a Ctrl-C, a SIGTERM, a failed rank, a
lost host, a timeout and a normal end all leave through the same door.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from clusterlaunch.controller.hostframes import HostFrames
from clusterlaunch.controller.hostrun import Heartbeats, HostRun
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.readloop import Sweeps, read_round, start_all
from clusterlaunch.controller.setups import kill_setups
from clusterlaunch.core import defaults, interrupts
from clusterlaunch.core import outcome as verdict
from clusterlaunch.core.errors import HOST_LOST, JobOutcome, OutputLost, StopJob, TransportError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.losttouch import host_stopped_the_job
from clusterlaunch.core.model import JobPlan
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.base import Connection
from clusterlaunch.transport.suspension import SuspendWatch

KILLED = "the job was killed (clusterlaunch kill)"
TEARDOWN_QUIET_S = 3.0  # in teardown, a host silent this long past the deadline is given up


class Supervisor:
    """Supervises one job across hosts; :meth:`run` returns how it ended."""

    def __init__(
        self,
        plan: JobPlan,
        connections: Mapping[str, Connection],
        router: OutputRouter,
        timeout: float | None = None,
        grace: float = defaults.GRACE_S,
        clock: Callable[[], float] = time.monotonic,
        fail_fast: bool = True,
        quiet_teardown: bool = True,
        fanout: int = defaults.FANOUT,
        stall_check: Callable[[], JobOutcome | None] | None = None,
        timeout_shown: float | None = None,
        heartbeat_timeout: float = defaults.HEARTBEAT_TIMEOUT_S,
        awake: SuspendWatch | None = None,
    ) -> None:
        """``fail_fast``: the first failing host stops all (torchrun jobs; ``exec --fail-fast``).

        ``quiet_teardown``: once teardown starts, torchrun's own shutdown output goes to the log
        only (for ``exec``, host output *is* the job's output). ``fanout``: agents started at once.
        ``stall_check``: ``--stall-timeout``'s. ``timeout_shown``: the ``--timeout`` given.
        ``heartbeat_timeout``: the agents', named when a host and this controller lost touch.
        ``awake``: the command's :class:`SuspendWatch` (a Ctrl-Z in its preflight counts too).
        """
        self.plan, self.fanout = plan, fanout
        self.fail_fast, self.quiet_teardown = fail_fast, quiet_teardown
        self._awake = awake or SuspendWatch(clock)
        self._sweeps = Sweeps()
        self.router = router
        self._frames = HostFrames(router, self._on_event)
        self.timeout = timeout
        self.timeout_shown = timeout if timeout_shown is None else timeout_shown
        self.grace, self.heartbeat_timeout = grace, heartbeat_timeout
        self.clock = clock
        self.hosts = [HostRun(node, connection=connections[node.host]) for node in plan.nodes]
        self.stop: JobOutcome | None = None
        self._ended_count = 0
        self._teardown_started = False
        self.heartbeats = Heartbeats(self.hosts)
        self.stall_check = stall_check or (lambda: None)

    # -- public ---------------------------------------------------------------
    def run(self) -> JobOutcome:
        """Start the job everywhere and supervise it to the end (teardown included)."""
        self.heartbeats.start()  # run's: already started, before its go (launcher.supervise)
        try:
            self._start_all()
            self._watch()
        except StopJob as stop:
            self._own_signal(stop)
        finally:
            self.teardown()
            self.heartbeats.stop()
        return self.outcome()

    def teardown(self) -> None:
        """Bring every host's job down (graceful, escalating on a second signal)."""
        if self._teardown_started:
            return
        self._teardown_started = True
        if self.stop is not None and self.quiet_teardown:
            self.router.quiet_hosts()
        self._send_all(b"t")
        deadline = self.clock() + self.grace + 3.0
        hurry = False
        # Only hosts with an agent can end: after an unexpected error while starting, waiting
        # for those without one took the whole deadline (grace + 3 s) for nothing.
        started = [h for h in self.hosts if h.process is not None]
        while not all(h.done for h in started) and self.clock() < deadline:
            try:  # a host in its setup has no agent to obey "t": kill it once its PID is in
                kill_setups([(host.connection, host.setup) for host in self.hosts if not host.done])
                if self._step(0.1) and not hurry:
                    # Output still arriving: the hosts send what their ranks wrote before they
                    # ended. Waiting costs time, closing would lose it: wait until they fall silent.
                    deadline = max(deadline, self.clock() + TEARDOWN_QUIET_S)
            except StopJob as stop:
                if self._hurried_by(stop, hurry):
                    hurry = True
                    deadline = min(deadline, self.clock() + 3.0)
        self.router.report_hidden()
        for host in self.hosts:
            if not host.flushed:
                self._flush(host)
            if note := host.teardown_note(self.heartbeat_timeout, self.plan.job_id):
                self.router.message(note)
            if host.process is not None:
                host.process.close()

    def _hurried_by(self, stop: StopJob, hurry: bool) -> bool:
        """A stop during the teardown; True when it now kills everything at once (Ctrl-C)."""
        if isinstance(stop, OutputLost):  # no signal: the teardown goes on, into the logs
            self._set_stop(JobOutcome(stop.exit_code, stop.reason, stopped=True))
            return False
        signalled = self.stop is not None and verdict.is_own_signal(self.stop)
        if self._own_signal(stop) or hurry or not interrupts.hurries(stop.signum):
            return False  # the hosts are stopping already, for the same reason
        again = "second interrupt" if signalled else f"{stop.reason} during the teardown"
        self.router.message(f"{again}: killing everything now")
        self._send_all(b"k")
        return True

    # -- start ----------------------------------------------------------------
    def _start_all(self) -> None:
        hosts = [host for host in self.hosts if host.process is None]  # run's: held.hand_over
        starts = [(host.connection, host.node.command, program_payload("agent")) for host in hosts]
        processes = start_all(starts, self.fanout, "agent", self._awake)
        for host, process in zip(hosts, processes, strict=True):
            if not isinstance(process, TransportError):
                host.process = process
                continue
            host.lost = host.done = True
            self.router.message(f"{host.node.host}: {process.detail}")
            if self.fail_fast:
                self._set_stop(
                    JobOutcome(ExitStatus.HOST_LOST, f"{host.node.host} could not start")
                )

    # -- watch ----------------------------------------------------------------
    def _watch(self) -> None:
        started = self.clock()
        while self.stop is None and not all(h.done for h in self.hosts):
            self._step(0.2)
            self._set_stop(self.stall_check())  # None: not stalled
            if self.timeout is not None and self.clock() - started > self.timeout:
                running = ", ".join(h.node.host for h in self.hosts if not h.done)
                reason = f"--timeout {self.timeout_shown:g} s reached (still running: {running})"
                self._set_stop(JobOutcome(ExitStatus.TIMEOUT, reason, stopped=True))

    def _step(self, wait: float) -> int:
        """Wait for output (at most ``wait`` s), route it, judge endings; bytes read."""
        running = [(h, h.process) for h in self.hosts if h.process is not None and not h.done]
        self._awake()
        if not running:
            time.sleep(wait)
            return 0
        due = self._sweeps.due(self.clock())
        return read_round(running, wait, self._take, due, hold=self.router.hold)

    def _take(self, host: HostRun, out: bytes, err: bytes) -> None:
        """One host's new bytes, read under the router's hold (``hostframes.py``): routed,
        then see whether it ended."""
        self._awake()  # the wait may have been a suspension: before any liveness judgement
        self._frames.take(host, out, err)
        with self.router.hold.let_through():  # the read is queued or in the files
            self._check(host)
            for line in host.setup.notices(self._awake.suspended_since):
                self.router.message(line)
            self.router.stop_if_lost()  # a log file given up: every byte above routed first

    def _on_event(self, host: HostRun, event: dict[str, Any]) -> None:
        if event.get("event") == "stopping" and self.quiet_teardown:
            # Said before its torchrun's shutdown lines, whoever began it (the hosts
            # that heard no heartbeat, too): those lines are noise from here on.
            self.router.quiet_hosts()
        if said := host.notice(event):  # an exit's message, a full folder of rank files
            self.router.message(said)
        signalled = verdict.signal_stop(host.node.host, event)
        if event.get("event") == "started":
            host.started = event
            self.router.started(host.node.host)
        elif event.get("event") == "store":  # node 0's own torchrun listens: the others may dial
            self._send_all(b"s")
        elif signalled is not None:
            if self.fail_fast:
                self._set_stop(signalled)
        elif event.get("event") == "stopping" and event.get("reason") == "killed":
            self._set_stop(JobOutcome(ExitStatus.KILLED, KILLED, stopped=True))
        elif event.get("event") == "stopping" and event.get("reason") == "controller-lost":
            suspended = self._awake.just_resumed()
            said, stop = host_stopped_the_job(host.node.host, self.heartbeat_timeout, suspended)
            self.router.message(said)
            self._set_stop(stop)
        elif event.get("event") == "exit":
            host.ended = event
            if event.get("reason") == "killed":
                self._set_stop(JobOutcome(ExitStatus.KILLED, KILLED, stopped=True))
            elif event.get("reason") == "job-running":  # exec: its id is another job's there
                self._set_stop(verdict.id_in_use(host.node.host, event))

    def _check(self, host: HostRun) -> None:
        assert host.process is not None
        if host.process.finished():
            self._host_finished(host)
        elif self._awake() and not host.connection.alive():
            host.lost = host.done = True
            self._ended_count += 1
            host.order, host.ended_before_stop = self._ended_count, self.stop is None
            self._flush(host)
            host.cut_off = True
            self.router.message(f"{host.node.host}: {HOST_LOST}")
            if self.fail_fast:
                self._set_stop(JobOutcome(ExitStatus.HOST_LOST, f"host {host.node.host} was lost"))
            else:
                host.process.close()

    def _host_finished(self, host: HostRun) -> None:
        assert host.process is not None
        host.status = host.process.exit_status()
        host.done = True
        self._ended_count += 1
        host.order, host.ended_before_stop = self._ended_count, self.stop is None
        self._flush(host)
        if host.ended is None:
            # No exit report: the agent never ran, or the host went away under it;
            # in teardown too (a failed Slurm node's srun ends after the other steps
            # got Slurm's SIGTERM: the lost host is still the cause).
            said = host.judge_unreported_end(self.router.tails.lines(("host", host.node.host)))
            if said and not self._teardown_started:
                self.router.message(f"{host.node.host}: {said}")
            if host.lost and self.fail_fast:
                self._set_stop(JobOutcome(ExitStatus.HOST_LOST, f"host {host.node.host} was lost"))
        if host.code != 0 and self.fail_fast:
            self._set_stop(JobOutcome(host.code, f"{host.node.host} failed"))

    def _flush(self, host: HostRun) -> None:
        """The host's stream ended: pass on all it left unfinished (once, unless a stop cut
        it short: the teardown flushes it again)."""
        self._frames.route(host, host.decoder.finish())  # a frame cut short, a short greeting
        with self.router.hold:  # each last line into the files before a stop goes through
            self.router.flush_host(host.node.host, host.node.global_ranks)
        host.flushed = True

    # -- ending ---------------------------------------------------------------
    def _set_stop(self, outcome: JobOutcome | None) -> None:
        self.stop = self.stop if self.stop is not None else outcome  # the first stop stays

    def _own_signal(self, stop: StopJob) -> bool:
        """A signal to us; True if it only replaced a host's as the reason (``scancel`` of
        ``sbatch`` or ``salloc -K`` signals us and every step alike, in either order)."""
        replaced = self.stop is not None and verdict.is_host_signal(self.stop)
        self.stop = None if replaced else self.stop
        self._set_stop(JobOutcome(stop.exit_code, stop.reason, stopped=True))
        return replaced

    def _send_all(self, command: bytes) -> None:
        """A control byte to every running host (one whose channel takes none: stdin closed)."""
        with self.router.hold.let_through():  # a full channel blocks: a signal stops the wait
            for host in self.hosts:
                if host.process is not None and not host.done and not host.process.send(command):
                    host.process.close_stdin()

    def outcome(self) -> JobOutcome:
        """Exit code and root cause, from everything the hosts reported."""
        return verdict.decide_outcome(self.stop, self.hosts, self.router.tails)
