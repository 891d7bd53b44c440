"""Build every command that reaches a remote shell. The only place that quotes.

Each word is passed through :func:`shlex.quote`, so ``shlex.split`` of a
command gives back exactly the argv we meant, whatever the strings contain.
The one deliberate exception is the hosts file's ``setup``, which is shell code
the user wrote for their own shell and is inserted as written.

Remote programs (the agent and the probe) are not in the command line: a short
bootstrap (:mod:`clusterlaunch.core.bootstrap`) reads them from stdin and runs
them, so the command stays readable in ``--dry-run`` and in ``ps``, and hosts
need nothing installed but Python.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterlaunch.core import envhandoff
from clusterlaunch.core.bootstrap import bootstrap_argv as bootstrap_argv  # planner, controller
from clusterlaunch.core.defaults import SETUP_TIMEOUT_S
from clusterlaunch.core.setupguard import SetupGuard, guarded
from clusterlaunch.core.sshargv import ssh_argv as ssh_argv  # rsync and the OpenSSH transport

if TYPE_CHECKING:  # model.py renders its plans with this module
    from clusterlaunch.core.model import ScriptKind


@dataclass(frozen=True)
class TorchrunSpec:
    """The torchrun invocation of one node."""

    python: str
    nnodes: int
    nproc: int | None
    """``None``: ``gpus: auto`` not resolved yet (a dry run shows ``AUTO``)."""
    node_rank: int
    master_addr: str
    master_port: int | None
    log_dir: str
    extra_args: tuple[str, ...]
    script: str
    script_args: tuple[str, ...]
    run_id: str | None = None
    """torchrun's ``--rdzv-id`` (workers' ``TORCHELASTIC_RUN_ID``); ``None``: the user sets it."""
    script_kind: ScriptKind = "file"


AUTO = "AUTO"
"""Shown in place of what the preflight decides (``auto`` port, process count) in a dry run;
torchrun's ``--log-dir``, which each host's agent makes in the user's private state dir
and fills in (``remote/claims.py``)."""
AUTO_PORT = AUTO
_SCRIPT_FLAGS = {"file": (), "module": ("--module",), "program": ("--no-python",)}


class HostPath(str):
    """A path the host's shell should expand ``~`` in (``workdir``, ``python``).

    Quoted like any word, except that a leading ``~`` or ``~/`` stays outside
    the quotes, so ``~/venv/bin/python`` means the remote user's home.
    """


def quote_word(word: str) -> str:
    """One word, shell-quoted (tilde left expandable for :class:`HostPath`)."""
    if isinstance(word, HostPath):
        if word == "~":
            return "~"
        if word.startswith("~/"):
            rest = word[2:]
            return "~/" + shlex.quote(rest) if rest else "~/"
    return shlex.quote(word)


def workdir_word(workdir: str) -> str:
    """``workdir`` as ``cd`` gets it: quoted, a leading ``~`` left to the host, and ``-``
    as ``./-`` (``cd -- -`` is ``cd "$OLDPWD"``: "OLDPWD not set", the job not started)."""
    return quote_word(HostPath("./-" if workdir == "-" else workdir))


def quote_argv(argv: Iterable[str]) -> str:
    """Join ``argv`` into one shell-safe string."""
    return " ".join(quote_word(word) for word in argv)


# What the login shell gets; the command itself comes first on stdin. sh, bash, zsh and
# ksh (no $version) run it in the login shell itself, as sshd ran it before: what
# .bashrc defined (conda, module) still works in setup:. tcsh and fish set $version:
# they skip line 1 silently (single quotes, no $( ) they would parse) and give it to
# /bin/sh; their own syntax broke on it ("Illegal variable name.", "fish: command
# substitutions not allowed here"). No newline, backslash or "!" inside the quotes,
# which csh and fish read otherwise. Neither head -c nor read reads a byte past it.
_ANY_LOGIN_SHELL = "[ -z \"$version\" ] && eval '{read}; exit'\nexec /bin/sh -c '{head}'"
# A command cut short runs none of it (stdin ended early, or a login file read some of
# it): it ends with this comment, and what lacks it is not run but named.
_END = " #cl-end"
_CHECK_END = (
    'case $__cl_c in *"' + _END + '") eval "$__cl_c";; *) echo "clusterlaunch: the command '
    'sent on stdin arrived cut short (does a login file read stdin?)" >&2; exit 1;; esac'
)
_READ_BY_HEAD = "__cl_c=$(head -c {size}) && " + _CHECK_END
# bash >= 4.1 reads it with a builtin: head's fork and exec cost 1.3 ms of CPU a
# command (3.8 against 2.5 ms for bash -c; measured here, 300 runs). read -N counts
# characters, so only a command in ASCII, where they are bytes in every locale.
_READ_BY_BASH = (
    "case ${{BASH_VERSION-}} in 4.[1-9]*|[5-9]*) IFS= read -r -N {size} __cl_c; "
    + _CHECK_END
    + ";; *) "
    + _READ_BY_HEAD
    + ";; esac"
)


def for_login_shell(command: str, stdin: bytes = b"") -> tuple[str, bytes]:
    """``command`` as sent: the line any login shell runs alike, and the stdin to write.

    The line reads ``command`` from the front of stdin (followed by ``stdin``)
    and runs it with the login shell, or ``/bin/sh`` where that is tcsh, csh
    or fish, so every command here may be POSIX sh, whatever the user's shell.
    """
    code = (command + _END).encode()
    read = _READ_BY_BASH if command.isascii() else _READ_BY_HEAD
    head = _READ_BY_HEAD.format(size=len(code))
    return _ANY_LOGIN_SHELL.format(read=read.format(size=len(code)), head=head), code + stdin


def torchrun_argv(spec: TorchrunSpec) -> list[str]:
    """torchrun with static rendezvous and per-rank output files the agent tails."""
    port = AUTO_PORT if spec.master_port is None else str(spec.master_port)
    run_id = [] if spec.run_id is None else ["--rdzv-id", spec.run_id]
    return [
        spec.python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(spec.nnodes),
        "--nproc-per-node",
        AUTO if spec.nproc is None else str(spec.nproc),
        "--node-rank",
        str(spec.node_rank),
        "--rdzv-backend",
        "static",
        *run_id,
        "--master-addr",
        spec.master_addr,
        "--master-port",
        port,
        "--redirects",
        "3",
        "--log-dir",
        spec.log_dir,
        *spec.extra_args,
        *_SCRIPT_FLAGS[spec.script_kind],
        # torchrun's argparse drops a "--" right after SCRIPT, but not after this one
        # (Python 3.6-3.13): "train.py -- --lr 1" reaches the script as typed.
        "--",
        spec.script,
        *spec.script_args,
    ]


def fill_master_port(argv: Sequence[str], port: int) -> list[str]:
    """``argv`` from :func:`torchrun_argv` with its ``AUTO`` port word replaced by ``port``."""
    at = list(argv).index("--master-port", 1) + 1  # after PYTHON, clusterlaunch's options first
    if argv[at] != AUTO_PORT:
        raise ValueError(f"the master port is already set ({argv[at]})")
    return [*argv[:at], str(port), *argv[at + 1 :]]


def agent_command(
    workdir: str,
    setup: str | None,
    env: Mapping[str, str],
    agent_argv: Sequence[str],
    job_argv: Sequence[str],
    guard: SetupGuard,
) -> str:
    """The command of a job's node: the agent, which runs ``job_argv`` (the words after ``--``)."""
    return shell_command(workdir, setup, env, [*agent_argv, "--", *job_argv], guard)


def shell_command(
    workdir: str | None,
    setup: str | None,
    env: Mapping[str, str],
    argv: Sequence[str],
    guard: SetupGuard | None = None,
) -> str:
    """``cd WORKDIR && SETUP && <set env> && exec ARGV`` as one string for ``sh -c``.

    ``exec`` makes the program the session's process, so nothing but it sits
    between sshd and the job; :func:`exec_with` sets the variables.
    ``setup`` is the user's own shell code, the one part not quoted; it runs
    under ``guard`` (:func:`clusterlaunch.core.setupguard.guarded`: stdin closed,
    bounded in time, its process group reported so it can be killed).
    """
    parts: list[str] = []
    if workdir:
        parts.append("cd -- " + workdir_word(workdir))
    if setup:
        parts.append(guarded(setup, guard or SetupGuard(SETUP_TIMEOUT_S)))
    parts.append(exec_with(env, argv))
    return " && ".join(parts)


def exec_with(env: Mapping[str, str], argv: Sequence[str]) -> str:
    """``exec ARGV`` with ``env`` set, no value on any command line (see
    :mod:`clusterlaunch.core.envhandoff`); ``exec ARGV`` alone without variables
    (one program start less per host, 0.6 ms of CPU measured here)."""
    if not env:
        return "exec " + quote_argv(argv)
    held = " ".join(f"{name}={quote_word(value)}" for name, value in envhandoff.held(env))
    shell = quote_argv([envhandoff.SHELL, "-c", envhandoff.renaming_script(env), "sh"])
    return f"export {held} && exec {shell} {quote_argv(argv)}"


# ------------------------------------------------------------------------------ code sync


def sync_prepare_command(workdir: str, token: str) -> str:
    """Create ``workdir``, leave ``token`` in it, and print ``rsync=<path or nothing>``.

    Run without the job's ``setup``: rsync's server is started the same bare way.
    """
    where = workdir_word(workdir)
    return (
        f"mkdir -p -- {where} && cd -- {where} && : > {shlex.quote(token)} && "
        "printf 'rsync=%s\\n' \"$(command -v rsync)\""
    )


def sync_tokens_command(workdir: str, prefix: str) -> str:
    """Print ``token=<name>`` for every file in ``workdir`` whose name starts with ``prefix``."""
    # An unmatched glob prints the pattern itself; the caller keeps known names only.
    return (
        f"cd -- {workdir_word(workdir)} && "
        f"for f in {shlex.quote(prefix)}*; do printf 'token=%s\\n' \"$f\"; done"
    )


def sync_cleanup_command(workdir: str, token: str) -> str:
    """Remove ``token`` from ``workdir``."""
    return f"cd -- {workdir_word(workdir)} && rm -f -- {shlex.quote(token)}"


def proxy_command(argv: Sequence[str]) -> str:
    """A ``ProxyCommand`` value: ssh runs it with the user's shell (``%h``/``%p`` expanded)."""
    return quote_argv(argv)


def home_relative(path: str) -> str:
    """A :class:`HostPath` for programs that do not run it through a shell (SFTP, rsync -s).

    Both start in the login directory, so ``~/x`` is just ``x`` and ``~`` is ``.``.
    """
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    return path


def rsync_argv(ssh: Sequence[str], alias: str, workdir: str, source: str, report: str) -> list[str]:
    """rsync of the files listed on stdin (NUL-separated) from ``source`` to ``alias:workdir``.

    ``--rsh`` is one string that rsync splits itself, honouring single and
    double quotes (adjacent quoted parts join), which :func:`shlex.quote`'s
    output satisfies. ``--protect-args`` sends the destination over rsync's
    own protocol, so the remote shell never word-splits it; that is also why
    ``~`` is turned into a home-relative path here.
    Times and permissions are kept (the next run's quick check then skips
    unchanged files); owners are not, and nothing is deleted on the host. Runs
    of zeros are written as holes (``--sparse``; rsync refuses it only with
    ``--inplace``, which is not used: files are replaced whole).
    """
    host = f"[{alias}]" if ":" in alias else alias
    return [
        "rsync",
        "--links",
        "--perms",
        "--times",
        "--omit-dir-times",
        "--sparse",  # a sparse file (a preallocated dataset) stays sparse on the host
        "--protect-args",
        "--8-bit-output",
        "--from0",
        "--files-from=-",
        f"--out-format={report}%i %l %n",
        "--rsh=" + quote_argv(ssh),
        "--",
        source.rstrip("/") + "/",
        f"{host}:{home_relative(workdir)}",
    ]
