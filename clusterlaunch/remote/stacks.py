"""The Python stacks of one job's workers on this host, with py-spy (stdlib only; part of jobctl).

Workers are found below the job's agent (from its record, verified by PID and
start time), as the processes torchrun itself started (its direct children),
their ranks read from ``RANK`` and ``LOCAL_RANK`` in their environment. Not by
the environment alone: a DataLoader worker or a rank's daemon inherits the
variables too, and a daemon re-parented to the agent (the subreaper) once
counted as a second worker of its rank. ``py-spy dump`` reads a process's stacks
without stopping it; it needs ptrace permission: root (CAP_SYS_PTRACE), or the
same user with ``kernel.yama.ptrace_scope`` 0 (with 1, only a process's
ancestors may trace it, and jobctl is not one of the workers' ancestors).
"""

import os
import shutil
import subprocess
import sys
import threading

from clusterlaunch.remote.proctree import children_of, descendants, read_stat  # bundle: strip
from clusterlaunch.remote.storewait import is_torchrun  # bundle: strip

HOW_TO_GET = (
    "py-spy is not installed for %s on this host: pip install py-spy "
    "(in the job's environment), then run clusterlaunch stacks again"
)


def find_py_spy(job_python=None):
    """py-spy next to the job's Python (its virtual environment, as its record names it),
    else next to this Python (``--python``'s), else on PATH.

    The job's first: jobctl's interpreter is whatever ``--python`` said (the
    system's, say) while the job ran from a venv that has py-spy."""
    for python in (job_python, sys.executable):
        if python and os.path.isabs(python):
            beside = os.path.join(os.path.dirname(python), "py-spy")
            if os.access(beside, os.X_OK):
                return beside
    return shutil.which("py-spy")


def worker_environ(pid):
    """``{"RANK", "LOCAL_RANK"}`` of a torchrun worker ``pid``, else None."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    found = {}
    for entry in entries:
        name, _, value = entry.partition(b"=")
        if name in (b"RANK", b"LOCAL_RANK") and value.isdigit():
            found[name.decode()] = int(value)
    return found if len(found) == 2 else None


def job_workers(agent_pid):
    """``[(pid, rank, local_rank)]`` of the workers torchrun started below ``agent_pid``."""
    workers = []
    for launcher in torchrun_pids(agent_pid):
        for pid in children_of(launcher):
            env = worker_environ(pid)
            info = read_stat(pid)
            if env is not None and info is not None and info[0] != "Z":
                workers.append((pid, env["RANK"], env["LOCAL_RANK"]))
    return sorted(workers, key=lambda worker: worker[1])


def torchrun_pids(agent_pid):
    """torchrun itself below ``agent_pid``: where a job hangs before it has workers
    (a static rendezvous waiting for the master, say)."""
    found = []
    for pid in descendants(agent_pid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if is_torchrun(argv):
            found.append(pid)
    return found


def dump(py_spy, pid, timeout):
    """``(text, error)`` of ``py-spy dump --pid PID``."""
    try:
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, "py-spy dump failed: %s" % exc
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return None, "py-spy dump failed (exit %d): %s" % (done.returncode, why[0])
    return one_line_command(done.stdout.decode("utf-8", "replace")), None


def one_line_command(text):
    """py-spy's dump with its ``Process PID: COMMAND`` header on one line: a command with
    newlines (torchrun started by ``python -c`` with clusterlaunch's wrapper, 18 lines)
    ends at its first, marked ``...``; the stacks below are untouched."""
    lines = text.split("\n")
    if not lines[0].startswith("Process "):
        return text
    for index, line in enumerate(lines[1:40], start=1):
        if line.startswith("Python v"):
            cut = lines[0] + (" ..." if index > 1 else "")
            return "\n".join([cut, *lines[index:]])
    return text


def job_stacks(records, timeout):
    """One dict per worker of these agents' jobs (all dumped at once), or a ``nostacks``."""
    job_python = next((r["command"][0] for r in records if r.get("command")), None)
    py_spy = find_py_spy(job_python)
    if py_spy is None:
        return [{"event": "nostacks", "why": HOW_TO_GET % (job_python or sys.executable)}]
    found = []
    threads = []

    def one(record, pid, rank, local_rank):
        text, error = dump(py_spy, pid, timeout)
        found.append(
            {
                "event": "stack",
                "job_id": record["job_id"],
                "node_rank": record["node_rank"],
                "agent_pid": record["agent_pid"],
                "ssh_server": record.get("ssh_server", ""),
                "pid": pid,
                "rank": rank,
                "local_rank": local_rank,
                "text": text,
                "error": error,
            }
        )

    for record in records:
        workers = job_workers(record["agent_pid"])
        if not workers:  # none yet (or any more): torchrun's own stack, as rank None
            workers = [(pid, None, None) for pid in torchrun_pids(record["agent_pid"])]
        for worker in workers:
            threads.append(threading.Thread(target=one, args=(record, *worker)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(found, key=lambda item: (item["rank"] is not None, item["rank"] or 0))
