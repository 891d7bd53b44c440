"""List and stop clusterlaunch jobs on this host, from their records (stdlib only).

``list`` prints every live record; ``stacks JOB_ID`` the Python stack of each
of that job's workers (``remote/stacks.py``); ``kill JOB_ID`` sends SIGUSR1 to each agent
of that job (which then tears its job down: SIGTERM, grace, SIGKILL, by
process group and PID) and waits until the agents are gone; an agent that holds the
id's claim but has not started its job yet (its preflight) is told too, and does not
start it, and a dated mark stops one not even there yet (``remote/gate.py``). Each ends with
an ``end`` line, so an empty answer is never mistaken for "no jobs". Agents are
identified by PID *and* start time, so a recycled PID is never signalled, and
nothing but our own agents is ever touched. Every answer is an event frame of
:mod:`clusterlaunch.core.protocol` on stdout.
"""

import argparse
import os
import sys
import time

from clusterlaunch.core.protocol import SYNC, encode_event  # bundle: strip
from clusterlaunch.remote.claims import live_claims  # bundle: strip
from clusterlaunch.remote.proctree import signal  # bundle: strip
from clusterlaunch.remote.recordfiles import live_records  # bundle: strip
from clusterlaunch.remote.records import (  # bundle: strip
    mark_killed,  # bundle: strip
    process_start_time,  # bundle: strip
    this_hosts,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.stacks import job_stacks  # bundle: strip
from clusterlaunch.remote.teardown import ending_setup_leftovers  # bundle: strip


def emit(**fields):
    sys.stdout.buffer.write(encode_event(fields))
    sys.stdout.buffer.flush()


def this_hosts_records(claims):
    """The live records of jobs that came in through this session's sshd. One that could not
    be read says nothing of its sshd: its agent's claim (of ``claims``) does."""
    records = live_records()
    for record in records:
        if "unreadable" in record:
            places = [c["ssh_server"] for c in claims if _same_agent(c, record)]
            record["ssh_server"] = places[0] if places else ""
    return this_hosts(records)


def _same_agent(one, other):
    return (one["agent_pid"], one["agent_start"]) == (other["agent_pid"], other["agent_start"])


def kill_job(job_id, timeout):
    # Dated, whether or not the job runs here: one of this id still starting (its setup,
    # a restart's backoff) does not start at its go (remote/gate.py).
    mark_killed(job_id)
    claims = live_claims()
    targets = [r for r in this_hosts_records(claims) if r["job_id"] == job_id]
    running = [r["agent_pid"] for r in targets]
    starting = [
        c for c in this_hosts(claims) if c["job_id"] == job_id and c["agent_pid"] not in running
    ]
    started = time.monotonic()
    for agent in targets + starting:  # one in its preflight records the signal: no start
        if process_start_time(agent["agent_pid"]) == agent["agent_start"]:
            try:
                os.kill(agent["agent_pid"], signal.SIGUSR1)
            except ProcessLookupError:
                pass
    pending = list(targets)
    while pending and time.monotonic() - started < timeout:
        time.sleep(0.05)
        pending = [r for r in pending if process_start_time(r["agent_pid"]) == r["agent_start"]]
    for record in targets:
        emit(
            event="killed",
            job_id=job_id,
            node_rank=record["node_rank"],
            agent_pid=record["agent_pid"],
            ssh_server=record.get("ssh_server", ""),
            stopped=record not in pending,
            seconds=round(time.monotonic() - started, 3),
            nodes=node_count(record),
        )
    for claim in starting:
        emit(event="starting", **claim)


def node_count(record):
    """How many nodes the job of ``record`` has, as its agent was told (``--nodes``). The
    record of an agent from before that (a long job outlives an upgrade) has it only for a
    ``run``, from torchrun's ``--nnodes``: an ``exec``'s command does not say (None), even
    when it is a torchrun of the user's own."""
    if isinstance(record.get("nodes"), int):
        return record["nodes"]
    command = record.get("command") or []
    if not record.get("tail_dir") or "--nnodes" not in command[:-1]:  # tail_dir: run's ranks
        return None
    value = command[command.index("--nnodes") + 1]
    return int(value) if value.isdigit() else None


def own_records(records):
    """The records of nodes started over this very SSH server address, if any are.

    Hosts that share one machine (the simulated ones) see each other's
    records; py-spy attaching one worker from several hosts at once fails.
    A host reached at another address than when the job started has no
    match, and gets every record.
    """
    server = " ".join(os.environ.get("SSH_CONNECTION", "").split()[2:4])
    mine = [r for r in records if server and r.get("ssh_server") == server]
    return mine or records


def main(argv=None):
    return ending_setup_leftovers(answer, argv)


def answer(argv):
    parser = argparse.ArgumentParser(prog="clusterlaunch-jobctl")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    kill = sub.add_parser("kill")
    kill.add_argument("job_id")
    kill.add_argument("--timeout", type=float, required=True)  # always given
    stacks = sub.add_parser("stacks")
    stacks.add_argument("job_id")
    stacks.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    sys.stdout.buffer.write(SYNC)
    if args.command == "list":
        # Dead agents' claims, files and all, go as their records do.
        for record in this_hosts_records(live_claims()):
            emit(**dict(record, event="job"))  # a record's own "event" field is not the frame's
    elif args.command == "stacks":
        records = [r for r in this_hosts_records(live_claims()) if r["job_id"] == args.job_id]
        records = own_records(records)
        for item in job_stacks(records, args.timeout) if records else []:
            emit(**item)
    else:
        kill_job(args.job_id, args.timeout)
    # Without this line the controller cannot tell "no jobs here" from
    # "jobctl never ran" (a wrong --python, a failed setup).
    emit(event="end")


if __name__ == "__main__":
    main()
