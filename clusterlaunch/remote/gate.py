"""What must hold before the agent starts its job: for ``run`` its host's checks, then
the controller's go; for every job, the job id's claim on this host and no kill since
its controller started.

Bundled with the agent (stdlib only, Python >= 3.8). One SSH session and one
interpreter per host for a whole ``run``: the agent makes the checks the probe
makes for ``check`` (:mod:`clusterlaunch.remote.checks`), reports them as the
probe would (``static``, ``connect``, ``end`` event frames), and starts its job
only on the controller's go. Lines on stdin, before the go:

* node 0's master port (empty: there is none), which every node dials;
* node 0 only: ``done`` once every node has dialled (it stops listening for dials, but
  holds the port until the instant before it starts torchrun: :meth:`Serving.stop`);
* ``go JSON``: the final job, with what the plan filled in after the
  preflight (the master port, ``gpus: auto`` counts): ``argv``, ``first_rank``,
  and the environment (``env`` to set, ``unset`` to remove); and ``since``, how
  many seconds ago the controller started the job (a kill after that: no start).

EOF, or no go within ``--preflight-timeout`` seconds: nothing starts. After
the go, stdin is the agent's control channel (:class:`wire.Control`).

Then, for ``run`` and ``exec`` alike (:func:`claimed_start`), the job does not start
where the id is another job's here (``exec`` claims it only now: it has no preflight)
or where ``clusterlaunch kill`` was run for it since its controller started (during a
slow ``setup:``, say, when no host had claimed it yet: it leaves a dated mark).
"""

import os
import time

from clusterlaunch.core.exits import ExitStatus  # bundle: strip
from clusterlaunch.remote.checks import connect_stage, start_serving, static_stage  # bundle: strip
from clusterlaunch.remote.claims import Claim  # bundle: strip
from clusterlaunch.remote.records import killed_since, record_folder  # bundle: strip
from clusterlaunch.remote.scratch import RANK_FILES, cannot_write, scratch_problem  # bundle: strip


def take_claim(args):
    """Hold ``args.job_id`` on this host (``remote/claims.py``): ``(claim, clash)``, the
    clash ``{}`` or why not, as the preflight reports it (``job_running``; a folder that
    refuses the claim: ``scratch_problem``)."""
    try:
        claim, holder = Claim.take(args.job_id, args.node_rank)
    except OSError as exc:
        return None, {"scratch_problem": cannot_write(record_folder(), exc)}
    if holder is not None:
        return None, {"job_running": holder}
    if claim is None:  # no private state folder: the check says why
        return None, {"scratch_problem": scratch_problem() or "no private state folder"}
    return claim, {}


def claimed_start(args, claim, out, killed=False):
    """Whether the job may start now: ``(claim, tail_dir, reason)``, ``reason`` None if it
    may. Where not, an ``exit`` event says why: the state folder cannot hold the job's
    files (``start-failed``), another job holds the id here (``job-running``, 2), or it was
    killed since its controller started (``killed``, 137, announced as for a running job):
    a dated mark says so, or (``killed``) SIGUSR1 came to the agent holding the claim."""
    why = scratch_problem(args.rank_files)  # a read-only or full /tmp: one line
    if why is None and claim is None:  # exec: claimed now (run: before its checks)
        claim, clash = take_claim(args)
        if "job_running" in clash:
            out.event(event="exit", reason="job-running", code=ExitStatus.USAGE, **clash)
            return claim, None, "job-running"
        why = clash.get("scratch_problem")
    if why is None and (killed or killed_since(args.job_id, args.since)):
        out.event(event="stopping", reason="killed")
        out.event(event="exit", reason="killed", code=ExitStatus.KILLED)
        return claim, None, "killed"
    tail_dir = None
    if why is None and args.rank_files:  # torchrun's per-rank files: claims.rank_files_dir
        try:
            tail_dir = claim.make_tail_dir()
        except OSError as exc:
            why = cannot_write(claim.tail_dir, exc, "create", RANK_FILES)
    if why is None:
        return claim, tail_dir, None
    out.event(event="exit", reason="start-failed", code=ExitStatus.NOT_STARTED, message=why)
    return claim, None, "start-failed"


def checked_and_go(args, out, control, clash):
    """Check this host, then take the final job from the go into ``args``. ``clash``: what
    taking the job id's claim met (``remote/claims.py``), reported.

    What holds node 0's master port meanwhile (:class:`~checks.Serving`, to stop the
    instant before the job starts: whatever binds the port first gets it), or None: no go.
    Without a nonce (``exec``): no checks, no go, nothing held.
    """
    if args.nonce is None:
        return start_serving(None, b"", 0)
    held = await_go(args, out, control, clash)
    if held is None:
        out.drain(1.0)
        return None
    go, serving = held
    # The controller cannot expand a host's "~": the first word, this host's python
    # (python: ~/venv/bin/python), stays as the shell expanded it in the agent's own
    # command. The go changes only what follows it (the port, the process count).
    args.argv = [args.argv[0], *go["argv"][1:]]
    args.first_rank = go["first_rank"]
    args.since = go.get("since")  # a kill after its controller started: no start
    os.environ.update(go["env"])  # the job's environment: the agent passes its own on
    for name in go["unset"]:
        os.environ.pop(name, None)
    control.last_heard = time.monotonic()  # heartbeats begin with the job
    return serving


def await_go(args, out, control, clash):
    """Report the checks; the go's fields and node 0's listener, still bound, or None (no
    go: a failed host, the controller gone; the listener closed)."""
    import site

    # The agent runs with -S (fast start, stdlib only); the checks need the
    # job's own sys.path, .pth files included: the torch it imports, -m modules.
    # What site runs (sitecustomize.py, .pth lines) may print: the agent's main()
    # took the channel off fd 1 before anything else (remote/channel.py).
    site.main()
    deadline = control.started + args.preflight_timeout
    fields, listener = static_stage(args, clash)
    _report(out, args, stage="static", **fields)
    serving = start_serving(listener, args.nonce.encode(), args.timeout)
    go = None
    try:
        go = _checked(args, out, control, listener is not None, deadline)
    finally:
        if go is None:
            serving.stop()
    return None if go is None else (go, serving)


def _checked(args, out, control, listens, deadline):
    """The connection check, then the go's fields (None: no go)."""
    port_text = control.read_line(deadline)
    if port_text is None:
        return None
    connect = connect_stage(args, port_text)
    if connect is not None:
        _report(out, args, stage="connect", **connect)
    while listens:  # every peer has dialled when the controller says "done"
        line = control.read_line(deadline)
        if line is None:
            return None
        listens = line != "done"
    _report(out, args, stage="end")
    line = control.read_line(deadline)
    if line is None or not line.startswith("go "):
        return None
    import json  # here: an exec's agent never gets this far, and json costs it 4-6 ms

    return json.loads(line[3:])


def _report(out, args, **fields):
    out.event(**fields)
    out.drain(args.preflight_timeout)  # small: written at once unless the channel is stuck
