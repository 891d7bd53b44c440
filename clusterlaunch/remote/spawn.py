"""Start the job as ``subprocess.Popen`` would, by hand: one fork, a few dup2s, one exec.

Stdlib only, Python >= 3.8; bundled into the agent. Not ``subprocess``: its
import (threading, selectors, locale, ...) cost every agent ~7 ms of a ~32 ms
start-up (``python -S``, 60 rounds here), on every host of every job, for one
child whose status the agent reads itself. What Popen did is done here too:
a session of its own, stdin ``/dev/null``, stdout and stderr to pipes, every
other descriptor closed, SIGPIPE and SIGXFSZ back to their default, the error
of a failed exec raised in the agent (sent back over a close-on-exec pipe),
and the parent-death signal, set before the exec.
"""

import os

from clusterlaunch.core.exits import ExitStatus  # bundle: strip
from clusterlaunch.remote.execformat import (  # bundle: strip
    looks_binary,  # bundle: strip
    read_head,  # bundle: strip
    shebang_interpreter,  # bundle: strip
)  # bundle: strip
from clusterlaunch.remote.hostlimits import limit_text  # bundle: strip
from clusterlaunch.remote.proctree import signal, term_when_parent_dies  # bundle: strip

ENOENT, ENOEXEC = 2, 8  # errno's numbers on Linux, without importing errno


def session_environ():
    """``os.environ`` as the SSH session gave it to this Python: without the ``LC_CTYPE``
    that Python set itself (PEP 538: a C or POSIX locale is coerced to C.UTF-8).

    Left in, every job got ``LC_CTYPE=C.UTF-8``, which ``ssh HOST COMMAND`` does not
    give (``printf 'é' | wc -m`` counted 1, not 2). ``/proc/self/environ`` still holds
    the environment this process was started with; the user's own ``LC_CTYPE`` and
    ``PYTHONCOERCECLOCALE`` pass through as they were.
    """
    env = dict(os.environ)
    try:
        with open("/proc/self/environ", "rb") as handle:
            given = handle.read().split(b"\0")
    except OSError:
        return env
    original = next((item[9:] for item in given if item.startswith(b"LC_CTYPE=")), None)
    if original is None:
        env.pop("LC_CTYPE", None)
    else:
        env["LC_CTYPE"] = os.fsdecode(original)
    return env


class StartFailed(OSError):
    """The job's program could not be executed; ``status`` is what a shell gives for it:
    127 not found (the program, or its ``#!`` interpreter), 126 found but not executable;
    2 where a limit of the host's session kept it from starting (nothing started there)."""

    def __init__(self, message, status):
        OSError.__init__(self, message)
        self.status = status


class Job:
    """The started job: its pid, the read ends of its stdout and stderr, its status."""

    def __init__(self, pid, stdout, stderr):
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode = None
        """Once ended: its exit status, or ``-N`` if signal N ended it (as Popen's)."""

    def poll(self):
        """The return code if the job has ended (reaping it), else None."""
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = returncode_of(status)
        return self.returncode


def returncode_of(status):
    """A wait status as Popen reports it: the exit status, or ``-N`` for signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def start_job(argv, env, pass_fds=()):
    """Start ``argv`` (found on ``env``'s PATH) with ``env``; a :class:`Job`, or OSError.

    ``pass_fds``: descriptors the job inherits, as Popen's; handed over: closed here.
    """
    agent = os.getpid()
    fds = []
    try:
        for _ in range(3):  # stdout, stderr, and the report: end of file means the exec worked
            fds += os.pipe()
        pid = os.fork()
    except OSError:  # a limit (ulimit -n, -u): none kept, the agent needs them to say so
        for fd in fds:
            os.close(fd)
        raise
    out_r, out_w, err_r, err_w, report_r, report_w = fds
    if pid == 0:
        _become_job(argv, env, agent, (out_w, err_w, report_w), pass_fds)
    for fd in (out_w, err_w, report_w, *pass_fds):
        os.close(fd)
    report = _read_to_end(report_r)
    if report:
        os.close(out_r)
        os.close(err_r)
        os.waitpid(pid, 0)
        status, _, message = report.decode("utf-8", "replace").partition(" ")
        raise StartFailed(message, int(status))
    return Job(pid, os.fdopen(out_r, "rb", 0), os.fdopen(err_r, "rb", 0))


def _become_job(argv, env, agent, fds, pass_fds):
    """In the child: set it up and exec ``argv``; never returns."""
    out_w, err_w, report_w = fds
    try:
        os.setsid()
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; exec keeps that
            signal.signal(signum, signal.SIG_DFL)
        term_when_parent_dies(agent)
        stdin = os.open(os.devnull, os.O_RDONLY)
        for fd, target in ((stdin, 0), (out_w, 1), (err_w, 2)):
            os.dup2(fd, target)
        _close_descriptors(keep=(report_w, *pass_fds))
        for fd in pass_fds:
            os.set_inheritable(fd, True)
        _exec_on_path(argv, env)
    except BaseException as exc:  # anything at all: the agent must hear of it, not hang
        status, message = _why_not_executed(exc, argv[0])
        os.write(report_w, ("%d %s" % (status, message)).encode("utf-8", "replace"))
    finally:
        os._exit(ExitStatus.NOT_STARTED)


def _exec_on_path(argv, env):
    """``os.execvpe`` without its ``import warnings`` (``os.get_exec_path``): 1.1 ms of
    every job's start, in the forked child, measured with ``-X importtime``. The same
    search: each folder of ``env``'s PATH (``os.defpath`` without one) in turn; the
    first error that is not "not found" wins, as ``os.execvpe``'s does."""
    name = argv[0]
    if os.path.dirname(name):
        _execve(name, argv, env)
    first = last = None
    for folder in env.get("PATH", os.defpath).split(os.pathsep):
        try:
            _execve(os.path.join(folder, name), argv, env)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
            if os.path.isfile(exc.filename or ""):  # found, its #! interpreter is not
                first = first or exc
        except OSError as exc:
            last = exc
            first = first or exc
    raise first or last


def _execve(path, argv, env):
    """``os.execve``; a file the kernel refuses (ENOEXEC) is run by ``/bin/sh`` as a shell
    (bash's execute_cmd.c, so ssh's command) runs it: a text file is a script of shell
    commands; one that looks binary by bash's rule (an ELF for another machine, a NUL
    in its first line) is refused, 126, its bytes never read as commands."""
    try:
        os.execve(path, argv, env)
    except OSError as exc:
        if exc.errno != ENOEXEC or looks_binary(read_head(path) or b""):
            raise
        os.execve("/bin/sh", ["/bin/sh", path, *argv[1:]], env)


def start_failure(program, exc):
    """The status and the words for a job that did not start: ``StartFailed``'s, or (the
    agent's own pipe or fork failed) a limit's, else 127 as before."""
    status = getattr(exc, "status", ExitStatus.NOT_STARTED)
    limit = None if isinstance(exc, StartFailed) else limit_text(exc)
    if limit is not None:
        status, exc = ExitStatus.USAGE, "%s: %s" % (exc, limit)
    return status, "cannot start %s: %s" % (program, exc)


def _why_not_executed(exc, name):
    """The status a shell gives for a program it cannot execute, and what to say; a limit
    of the session (no descriptor for /dev/null, say) is no program's fault: named."""
    if not isinstance(exc, OSError) or not exc.errno:
        return ExitStatus.NOT_STARTED, str(exc)
    limit = limit_text(exc)
    if limit is not None:
        return ExitStatus.USAGE, "%s: %s" % (exc, limit)
    path = exc.filename or name
    if exc.errno == ENOENT and os.path.isfile(path):  # the kernel's word for a bad #! line
        interpreter = shebang_interpreter(read_head(path) or b"")
        return ExitStatus.NOT_STARTED, "its #! interpreter %s is not found; fix its #! line" % (
            interpreter or "(none named)"
        )
    if exc.errno == ENOENT:
        return ExitStatus.NOT_STARTED, str(exc)
    if os.path.isdir(path):
        return ExitStatus.CANNOT_EXECUTE, "%s is a directory" % path
    if exc.errno == ENOEXEC:  # bash's words for it
        return ExitStatus.CANNOT_EXECUTE, "cannot execute binary file: Exec format error"
    return ExitStatus.CANNOT_EXECUTE, str(exc)


def _close_descriptors(keep):
    """Close every descriptor above 2 but those in ``keep`` (the agent's own are close-on-exec
    already; this is for any its parent left open, as Popen's ``close_fds``)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 1024)  # no /proc: the common soft limit
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                continue


def _read_to_end(fd):
    data = b""
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            os.close(fd)
            return data
        data += chunk
