"""The command line: the one place that maps errors to exit statuses and handles signals.

The statuses are :class:`clusterlaunch.core.exits.ExitStatus` (docs/cli.md
lists them); besides those, a failing rank's own exit code. A local OSError
nothing else expected is ``FAILED``, one line, never a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from clusterlaunch.cli import args as cliargs
from clusterlaunch.cli import doctor as doctorargs
from clusterlaunch.cli import parser as cliparser
from clusterlaunch.cli import sandbox as sandboxargs
from clusterlaunch.cli import slurm as slurmargs
from clusterlaunch.cli.heap import tune_heap
from clusterlaunch.cli.passthrough import (
    check_script_argument,
    command_parser,
    dash_value,
    foreign_option,
    split_passthrough,
    unknown_option,
)
from clusterlaunch.controller.console import Console, closed_std_streams
from clusterlaunch.controller.launcher import JobRequest, check, make_plan
from clusterlaunch.controller.restarts import run_job
from clusterlaunch.core import interrupts, render
from clusterlaunch.core.checkplan import agents_as_run
from clusterlaunch.core.errors import ClusterlaunchError, PreflightError, StopJob, UsageError
from clusterlaunch.core.exits import ExitStatus, from_signal
from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.core.model import JobPlan
from clusterlaunch.core.restarts import dry_run_fields, dry_run_text
from clusterlaunch.core.syncsource import SourceTree, dry_run_field, dry_run_line
from clusterlaunch.transport import close_all, connect_all
from clusterlaunch.transport.sshconfig import resolve_targets

_SIGNAL_EXITS = {
    signal.SIGINT: ExitStatus.INTERRUPTED,
    signal.SIGTERM: ExitStatus.TERMINATED,
    signal.SIGHUP: ExitStatus.HANGUP,
}
_SIGNAL_NAMES = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)"}

build_parser = cliparser.build_parser  # the parser, for docs and tests


def _job_control(args: argparse.Namespace, console: Console) -> int:
    """``ps`` / ``kill``: every host that could not be asked is an error line, and exit 2."""
    from clusterlaunch.controller import jobs  # only here: see cli/doctor.py

    slurmargs.refuse_the_word(args)
    inventory = load_inventory(args.hosts)
    cliargs.check_env_sizes(inventory.hosts)
    targets = resolve_targets(args.ssh_config, inventory.hosts)
    settings = cliargs.ssh_settings(args, inventory)
    note = (lambda line: console.say(f"clusterlaunch: {line}")) if args.verbose else None
    connections, problems = connect_all(targets, settings, args.fanout, note=note)
    unanswered = [jobs.Unanswered(p.host, f"could not ask: {p.detail}") for p in problems]
    reachable = [spec for spec in inventory.hosts if spec.host in connections]
    limit = args.setup_timeout
    try:
        if args.command == "ps":
            found, missed = jobs.list_jobs(
                reachable, targets, connections, args.python, limit, args.fanout
            )
            # "No jobs" only when every host answered, these and the unreachable ones.
            asked = [*unanswered, *missed]
            text = render.jobs_json(found) if args.json else render.jobs_text(found, asked)
            if text and args.json:  # JSON has escapes of its own
                console.out.write(text.encode() + b"\n")
            elif text:
                console.show(text)
        else:
            reports, missed, starting = jobs.kill_job(
                reachable,
                targets,
                connections,
                args.job_id,
                args.python,
                setup_timeout=limit,
                fanout=args.fanout,
            )
    finally:
        close_all(connections)
    unanswered += missed
    for host in unanswered:
        console.say(f"clusterlaunch: error: {host.host}: {render.printable(host.why)}")
    if args.command == "ps":
        return ExitStatus.USAGE if unanswered else ExitStatus.OK
    if starting and not reports:  # in its preflight: marked, it will not start
        console.say(render.kill_starting_text(args.job_id, starting))
        return ExitStatus.USAGE if unanswered else ExitStatus.OK
    if not reports:
        if len(unanswered) < len(inventory.hosts):
            where = "the hosts that answered" if unanswered else "these hosts"
            console.say(render.kill_missing_text(args.job_id, where))
        return ExitStatus.USAGE if unanswered else ExitStatus.FAILED
    console.show(render.kill_text(args.job_id, reports))
    if unanswered:
        return ExitStatus.USAGE
    return ExitStatus.OK if all(r.stopped for r in reports) else ExitStatus.FAILED


def _run(args: argparse.Namespace, console: Console) -> int:
    if args.command in ("run", "exec", "check", "doctor", "sandbox"):  # they need it
        cliargs.current_directory()  # deleted: said in one line, exit 2
    if args.command == "sandbox":
        return sandboxargs.run(args, console.out)  # type: ignore[arg-type]
    cliargs.check_words(args)
    if args.command in ("ps", "kill"):
        return _job_control(args, console)
    if args.command == "doctor":
        return doctorargs.run_doctor(args, console)
    if args.command == "stacks":
        return doctorargs.run_stacks(args, console)
    request = cliargs.job_request(args)
    plan = make_plan(request)  # once: the launch fills in an auto master port, no re-plan
    if args.command == "run" and not args.dry_run:
        cliargs.check_local_script(plan, request.options, synced=request.sync)
    # The dry run too: these checks are local and read-only, and it refuses what the run would.
    source = _sync_source(request, plan) if request.sync else None
    if args.dry_run:
        if request.exec_argv is None:  # each agent as run starts it: the preflight's words too
            options = request.options
            plan = agents_as_run(plan, options.script, options.script_kind, options.setup_timeout)
        spares = [spec for spec, _ in request.spares]
        job = (request.restarts, request.inventory.hosts, spares, request.inventory.master_addr)
        if args.json:
            extra = dry_run_fields(*job)
            text = render.plan_json(
                plan,
                {**extra, **({"sync": dry_run_field(source)} if source else {})},
                torchrun=request.exec_argv is None,
            )
        else:
            text = render.plan_text(plan, torchrun=request.exec_argv is None)
            text += slurmargs.dry_run_note(request.transport)
            text += dry_run_line(source) if source else ""
            text += dry_run_text(*job)
        console.out.write(text.encode() + b"\n")
        return ExitStatus.OK
    if args.command == "check":
        result = check(request, plan, console)
        console.show(render.preflight_text(result))
        return ExitStatus.USAGE if result.problems else ExitStatus.OK
    outcome = run_job(request, plan, console, source)
    return outcome.exit_code  # the launcher has printed (and logged) the summary


def _sync_source(request: JobRequest, plan: JobPlan) -> SourceTree:
    """The source ``--sync`` copies, scanned and checked against the plan (nothing contacted)."""
    from clusterlaunch.controller.syncscan import checked_source  # pathspec: only with --sync

    run_options = request.options if request.exec_argv is None else None
    return checked_source(plan, run_options, os.getcwd())


class _SignalStops(interrupts.StopHold):
    """The handler of SIGINT, SIGTERM and SIGHUP for one command. Signals become an exception,
    so every layer's ``finally`` runs teardown. Once one has, a SIGHUP or SIGTERM is dropped
    (``core/interrupts.py``: a closing terminal sends SIGHUP twice); a Ctrl-C still raises.
    The exception waits while a host's bytes go to the log files (``interrupts.StopHold``)."""

    def __init__(self) -> None:
        super().__init__()
        self.first: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not interrupts.stops(self.first, signum):
            return
        self.first = self.first or signum
        which = signal.Signals(signum)
        exit_code = _SIGNAL_EXITS.get(which, from_signal(signum))
        self.deliver(StopJob(exit_code, _SIGNAL_NAMES.get(which, which.name), signum))


def _install_signal_handlers() -> dict[signal.Signals, object]:
    """Signals become StopJob; returns the handlers they replaced (restored by main)."""
    replaced: dict[signal.Signals, object] = {}
    handler = _SignalStops()
    for signum in _SIGNAL_EXITS:
        # A signal ignored when we started stays ignored: that is what nohup
        # (SIGHUP) and a shell's background job (SIGINT) ask for.
        previous = signal.getsignal(signum)
        if previous is not signal.SIG_IGN:
            replaced[signum] = previous
            signal.signal(signum, handler)
    return replaced


def _restore_signal_handlers(replaced: dict[signal.Signals, object]) -> None:
    # main() called in process (a test, a program embedding the CLI) hands its
    # caller's Ctrl-C back: left installed, a later Ctrl-C raised StopJob inside
    # whatever the caller ran next.
    for signum, previous in replaced.items():
        signal.signal(signum, previous)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: returns (and, as a script, exits with) the exit status."""
    closed = [name for name in closed_std_streams() if name != "stdin"]  # stdin: /dev/null
    if closed:  # Python has no sys.stdout to give the console
        shown = " and ".join(closed)
        os.write(2, f"clusterlaunch: error: {shown} closed (>&-); to discard output, "
                    "redirect it: >/dev/null 2>&1\n".encode())  # fmt: skip
        return ExitStatus.USAGE
    console = Console()
    replaced: dict[signal.Signals, object] = {}
    try:
        parser = cliparser.build_parser()
        words = sys.argv[1:] if argv is None else argv
        head, passthrough = split_passthrough(parser, words)
        # torchrun's, DeepSpeed's ... flags (say ours); an option given "--" as its value
        hint = check_script_argument(parser, words) or foreign_option(parser, head)
        hint = hint or dash_value(head)
        if hint is not None:
            raise UsageError(hint)
        unknown = unknown_option(parser, head)
        if unknown is not None:  # argparse itself could name the wrong word
            command_parser(parser, head).error(f"unrecognized arguments: {unknown}")
        args, extra = parser.parse_known_args(head)
        if extra:  # argparse's own line named the top level's help, not the command's
            command_parser(parser, head).error(f"unrecognized arguments: {' '.join(extra)}")
        args.passthrough = passthrough
        replaced = _install_signal_handlers()
        code = _run(args, console)
        console.out.flush()  # a reader gone before the last bytes is a stop too
        return code
    except PreflightError as exc:
        console.say(exc.report())
        return ExitStatus.USAGE
    except UsageError as exc:  # one line: a name given with a newline in it split it in two
        console.say(f"clusterlaunch: error: {render.printable(str(exc))}")
        return ExitStatus.USAGE
    except StopJob as stop:
        if stop.exit_code != ExitStatus.BROKEN_PIPE:  # | head: leave as SIGPIPE would, quietly
            console.say(f"clusterlaunch: {stop.reason}")
        return stop.exit_code
    except ClusterlaunchError as exc:
        console.say(f"clusterlaunch: error: {render.printable(str(exc))}")
        return ExitStatus.FAILED
    except OSError as exc:
        # Last resort for a local failure nothing above expected; whatever was
        # started has been torn down by the finally blocks it passed through.
        console.say(f"clusterlaunch: error: {render.printable(_os_error_text(exc))}")
        return ExitStatus.FAILED
    finally:
        console.err.flush(stop=False)
        _restore_signal_handlers(replaced)


def script() -> NoReturn:
    """The ``clusterlaunch`` program: :func:`main`, then exit without tearing Python down.

    Python's own exit frees every module and object one at a time: 75-80 ms
    after a ``run`` (strace: from the last close to exit_group, no system call
    in between), on every command, after the job's output is all out. What
    must happen at exit happens here first, in the interpreter's order: other
    non-daemon threads are waited for, atexit handlers run (logging's flush),
    the standard streams are flushed. Under a profiler or a tracer (cProfile,
    pyinstrument, coverage), which report after the program returns, this is
    the ordinary exit.
    """
    tune_heap()  # before any thread starts: see cli/heap.py
    # What the imports made lives as long as the program: the collector's full passes
    # need not walk it again (exec on 32 hosts: 15 ms less CPU, 6 of 6 paired runs).
    gc.freeze()
    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # None: closed when we started (main refused to run)
                stream.flush()
    except OSError:
        sys.exit(code)  # Python's own exit reports it, as it always did
    os._exit(code)


def _os_error_text(exc: OSError) -> str:
    where = next((str(name) for name in (exc.filename, exc.filename2) if name), None)
    what = exc.strerror or type(exc).__name__
    return f"{where}: {what}" if where else f"{what} ({exc})"
