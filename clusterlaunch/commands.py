"""Build every command that reaches a remote shell. The only place that quotes.

Each word is passed through :func:`shlex.quote`, so ``shlex.split`` of a
command gives back exactly the argv we meant, whatever the strings contain.
The one deliberate exception is the hosts file's ``setup``, which is shell code
the user wrote for their own shell and is inserted as written.

Remote programs (the agent and the probe) are not in the command line: a short
bootstrap reads exactly ``size`` bytes of Python source from stdin and runs it,
so the command stays readable in ``--dry-run`` and in ``ps``, and hosts need
nothing installed but Python.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Reads exactly SIZE bytes of program from stdin (os.read can return less) and
# runs it; exits 98 if stdin closes early. Python >= 3.8 (walrus).
_BOOTSTRAP = (
    'import os;b=b"";[b:=b+(os.read(0,{size}-len(b)) or os._exit(98))'
    ' for _ in iter(lambda:len(b)<{size},False)];exec(compile(b,"clusterlaunch-{name}","exec"))'
)

# torchrun options clusterlaunch sets itself; passing them would desynchronise
# the plan from what runs.
OWNED_TORCHRUN_OPTIONS = (
    "--nnodes",
    "--nproc-per-node",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--standalone",
    "--log-dir",
    "--redirects",
    "--tee",
    "--local-ranks-filter",
    "--logs-specs",
    "--rdzv-backend",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--rdzv-conf",
    "--rdzv-timeout",
    "--max-nodes",
    "--run-path",
)
_OWNED_SHORT = {"-r": "--redirects", "-t": "--tee"}


@dataclass(frozen=True)
class TorchrunSpec:
    """The torchrun invocation of one node."""

    python: str
    nnodes: int
    nproc: int
    node_rank: int
    master_addr: str
    master_port: int | None
    log_dir: str
    extra_args: tuple[str, ...]
    script: str
    script_args: tuple[str, ...]


AUTO_PORT = "AUTO"
"""Shown in place of the port while ``master_port: auto`` is unresolved (dry run)."""


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


def quote_argv(argv: Iterable[str]) -> str:
    """Join ``argv`` into one shell-safe string."""
    return " ".join(quote_word(word) for word in argv)


def bootstrap_argv(python: str, name: str, size: int) -> list[str]:
    """``python -c <bootstrap>``: runs ``size`` bytes of program read from stdin."""
    return [python, "-c", _BOOTSTRAP.format(size=size, name=name)]


def torchrun_argv(spec: TorchrunSpec) -> list[str]:
    """torchrun with static rendezvous and per-rank output files the agent tails."""
    port = AUTO_PORT if spec.master_port is None else str(spec.master_port)
    return [
        spec.python,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(spec.nnodes),
        "--nproc-per-node",
        str(spec.nproc),
        "--node-rank",
        str(spec.node_rank),
        "--rdzv-backend",
        "static",
        "--master-addr",
        spec.master_addr,
        "--master-port",
        port,
        "--redirects",
        "3",
        "--log-dir",
        spec.log_dir,
        *spec.extra_args,
        spec.script,
        *spec.script_args,
    ]


def shell_command(
    workdir: str | None,
    setup: str | None,
    env: Mapping[str, str],
    argv: Sequence[str],
) -> str:
    """``cd WORKDIR && SETUP && exec env K=V... ARGV`` as one string for ``sh -c``.

    ``exec`` makes the program the session's process, so nothing but it sits
    between sshd and the job; ``env`` sets variables without shell syntax.
    ``setup`` is the user's own shell code and is the one part not quoted.
    """
    parts: list[str] = []
    if workdir:
        parts.append("cd -- " + quote_word(HostPath(workdir)))
    if setup:
        # A group, closed on its own line: a trailing comment in the setup
        # cannot swallow the rest, and its "||" cannot bypass a failed cd.
        parts.append("{ " + setup.strip() + "\n}")
    assignments = [f"{name}={value}" for name, value in env.items()]
    parts.append("exec " + quote_argv(["env", *assignments, *argv]))
    return " && ".join(parts)


def owned_torchrun_option(word: str) -> str | None:
    """The clusterlaunch-owned torchrun option ``word`` spells, or ``None``.

    Accepts ``--opt=value``, underscores for hyphens, and the unambiguous
    prefixes torchrun's argparse would accept.
    """
    if word in _OWNED_SHORT:
        return _OWNED_SHORT[word]
    if not word.startswith("--"):
        return None
    name = word.split("=", 1)[0].replace("_", "-")
    if name.startswith("--rdzv"):
        return name
    for owned in OWNED_TORCHRUN_OPTIONS:
        if name == owned or (len(name) >= 5 and owned.startswith(name)):
            return owned
    return None
