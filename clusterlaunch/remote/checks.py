"""The preflight's checks of one host, shared by the probe (``check``) and the agent (``run``).

Stdlib only, Python >= 3.8; bundled into both programs. Each runs under the
job's own ``cd WORKDIR && SETUP && <variables> exec PYTHON`` prefix, so the checks
test exactly what the job will use.

With a job id (torchrun jobs) they also report a job of that id already holding
this host (its claim, ``remote/claims.py``: running, or still in its preflight),
and when the id was last killed here (``clusterlaunch kill``: a restart must not
start).

Node 0 (``listen``) binds the master port (``0`` = pick a free one), reports
it, and answers connection checks until the agent starts the job (the check
is over by then; holding the port to the last instant leaves the least time
for anything else to take it before torchrun's store binds it). Every node
then dials ``master_addr:PORT`` and sends a nonce; only our own listener
echoes it, so a hit on some other service does not count.
"""

import os
import sys

from clusterlaunch.core.hostport import host_port  # bundle: strip
from clusterlaunch.remote.accel import find_devices  # bundle: strip
from clusterlaunch.remote.claims import holder_of  # bundle: strip
from clusterlaunch.remote.diskspace import rank_files_space  # bundle: strip
from clusterlaunch.remote.execformat import start_problem  # bundle: strip
from clusterlaunch.remote.findmodule import module_problem  # bundle: strip
from clusterlaunch.remote.hostlimits import limits_problem  # bundle: strip
from clusterlaunch.remote.listener import open_listener  # bundle: strip
from clusterlaunch.remote.records import hostname, killed_ago  # bundle: strip
from clusterlaunch.remote.scratch import scratch_problem  # bundle: strip
from clusterlaunch.remote.torchfiles import torch_files, torchrun_problem  # bundle: strip


def torch_version():
    """The version of the torch the job would import, without importing it, or None."""
    version = torch_files()["torch"]
    if version is not None:
        return version
    from importlib import metadata  # a torch without version.py: 28-43 ms, so only then

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def script_problem(path):
    """Why ``python PATH`` could not run the directory ``path``, or None.

    Python runs a file (a script, a zipapp) or a directory by its ``__main__.py``.
    """
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "__main__.py")):
        return "script %r in %s is a directory without __main__.py; check the path" % (
            path,
            os.getcwd(),
        )
    return None


def program_problem(name):
    """Why torchrun --no-python could not run ``name`` here (from the workdir, or PATH), or None."""
    import shutil  # here: only --no-python jobs need it

    found = shutil.which(name)
    if found is not None:
        return start_problem(name, found)
    if "/" in name and os.path.isfile(name):
        return "program %r in %s is not executable; chmod +x it" % (name, os.getcwd())
    if "/" in name and os.path.isdir(name):
        return "program %r in %s is a directory; name the program in it" % (name, os.getcwd())
    where = os.getcwd() if "/" in name else "PATH"
    return "program %r not found in %s; check the name and workdir:" % (name, where)


def static_checks(args, clash=None):
    """The first report's checks. ``clash``: the agent's, from taking its claim (it holds
    the id now, so looking again would find itself); the probe looks."""
    fields = {
        "hostname": hostname(),
        "python": sys.version.split()[0],  # platform.python_version(), without its 8 ms import
        "executable": sys.executable,
        "cwd": os.getcwd(),
        # ulimit -n or -u too low to start the job; the probe has no job (argv) to start
        "limit_problem": limits_problem(probe=getattr(args, "argv", None) is None),
    }
    fields.update(find_devices(args.accelerator))
    fields["scratch_problem"] = scratch_problem(args.need_torch)  # torchrun: its rank files too
    if args.need_torch:
        fields["rank_files"] = rank_files_space()  # enough free there? (core/rankdisk.py)
        fields["torch"] = torch_version()
        # torchrun reads every option from PET_<NAME> too, past the checks of its argv, and
        # TORCH_ELASTIC_WORKER_IDENTICAL=1 gives wrong ranks where process counts differ.
        fields["torchrun_env"] = sorted(name for name in os.environ if _torchrun_reads(name))
        job = getattr(args, "argv", None)  # the agent's torchrun command (the probe has none)
        if job and "torch.distributed.run" in job:
            fields["torchrun_problem"] = torchrun_problem(job, fields["torch"])
    if args.script:
        fields["script_found"] = os.path.isfile(args.script) or os.path.isdir(args.script)
        fields["script_problem"] = script_problem(args.script)
    if args.module:
        fields["script_problem"] = module_problem(args.module)
    if args.program:
        fields["script_problem"] = program_problem(args.program)
    if args.job_id:
        fields.update(job_clash(args.job_id, args.node_rank) if clash is None else clash)
        fields["killed_ago"] = killed_ago(args.job_id)  # clusterlaunch kill: no restart
    return fields


def _torchrun_reads(name):
    """A variable torchrun reads past clusterlaunch's checks (core/envpolicy.py refuses them)."""
    return name.startswith("PET_") or name == "TORCH_ELASTIC_WORKER_IDENTICAL"


def job_clash(job_id, node_rank):
    """A live agent holding our id here (``{"job_running": ...}``), else nothing."""
    holder = holder_of(job_id, node_rank)
    return {} if holder is None else {"job_running": holder}


def serve(listener, nonce, stop, timeout):
    """Echo the nonce to every checker until ``stop`` is set."""
    import socket

    try:
        listener.settimeout(0.2)
    except OSError:  # closed before this thread ran (the port let go at once)
        return
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except socket.timeout:  # noqa: UP041 (not TimeoutError before Python 3.10)
            continue
        except OSError:
            return
        with conn:
            conn.settimeout(timeout)
            try:
                if conn.recv(64).strip() == nonce:
                    conn.sendall(nonce + b" ok\n")
                # Let the dialler close first: the side that closes first keeps
                # TIME_WAIT, and on this side it would block torchrun's bind.
                conn.recv(1)
            except OSError:
                pass


def dial(addr, port, nonce, timeout):
    import socket

    try:
        with socket.create_connection((addr, port), timeout=timeout) as conn:
            conn.sendall(nonce + b"\n")
            reply = conn.recv(64)
    except OSError as exc:
        return "cannot connect to %s: %s" % (host_port(addr, port), exc)
    if reply.strip() != nonce + b" ok":
        where = host_port(addr, port)
        return "%s answered, but it is not our node 0 (another service on that port?)" % where
    return None


def static_stage(args, clash=None):
    """The first report's fields, and node 0's listener (None elsewhere, or if it failed)."""
    fields = static_checks(args, clash)
    listener = None
    if args.listen is not None:
        try:
            listener = open_listener(args.listen)
            fields["port"] = listener.getsockname()[1]
        except OSError as exc:
            fields["listen_error"] = "cannot bind port %d: %s" % (args.listen, exc.strerror or exc)
    return fields, listener


def start_serving(listener, nonce, timeout):
    """Answer every dialler from a thread (none without a listener) until :meth:`Serving.stop`."""
    return Serving(listener, nonce, timeout)


class Serving:
    """Node 0's listener for the connection check, answered by :func:`serve` in a thread."""

    def __init__(self, listener, nonce, timeout):
        self.listener = listener
        self.timeout = timeout
        self.thread = None
        if listener is not None:
            import threading  # here: the agent bundles this module, and an exec starts no thread

            self.stopping = threading.Event()
            serving = (listener, nonce, self.stopping, timeout)
            self.thread = threading.Thread(target=serve, args=serving, daemon=True)
            self.thread.start()

    def stop(self):
        """Close the listener (the port is free from here on) and wait for the thread to end.

        The agent forks the job next, and a fork beside a live thread may
        deadlock the child (Python 3.12 warns of it): the shutdown wakes an
        ``accept`` at once instead of at its next 0.2 s timeout.
        """
        if self.listener is None:
            return
        self.stopping.set()
        try:
            self.listener.shutdown(2)  # socket.SHUT_RDWR
        except OSError:
            pass
        self.listener.close()
        self.thread.join(self.timeout)


def connect_stage(args, port_text):
    """The second report: dial node 0 on the port the controller sent, or None if there is none."""
    if not port_text.isdigit():
        return None
    return {"error": dial(args.master_addr, int(port_text), args.nonce.encode(), args.timeout)}
