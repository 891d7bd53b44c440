"""Which environment variables may travel to a remote host, and how they merge.

Forwarding the whole local environment breaks remote shells (read-only
variables, ``SSH_*`` of the wrong connection, huge ``BASH_FUNC_*`` blobs,
another machine's ``PATH``); forwarding nothing leaves ``NCCL_*`` behind. The
rules here are the middle ground, and they are the only place that decides it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

from clusterlaunch.core.limits import shown

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Never sent, however asked: they belong to the remote shell, to the SSH
# connection, to torchrun's rendezvous or to clusterlaunch itself.
_READ_ONLY = frozenset({"BASHOPTS", "BASH_VERSINFO", "EUID", "PPID", "SHELLOPTS", "UID", "_"})
# What the hosts' /bin/sh (dash; bash as sh) gives a meaning of its own, so that a value
# set there (clusterlaunch.core.envhandoff) does not arrive as written: a number it
# counts or draws itself, a list, arithmetic (bash's OPTIND='a[$(cmd)]' ran cmd), a
# number dash refuses (OPTIND), or bash's SHLVL, one less at each exec.
_SHELL_OWN = frozenset(
    {
        *("BASHPID", "BASH_ARGC", "BASH_ARGV", "BASH_COMMAND", "BASH_LINENO", "BASH_SOURCE"),
        *("BASH_SUBSHELL", "DIRSTACK", "EPOCHREALTIME", "EPOCHSECONDS", "FUNCNAME", "GROUPS"),
        *("HISTCMD", "LINENO", "OPTIND", "RANDOM", "SECONDS", "SHLVL", "SRANDOM"),
    }
)
_OWNED_EXACT = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_ELASTIC_WORKER_IDENTICAL",
    }
)
# Set per host from devices: (which one: clusterlaunch.core.accelerators).
_DEVICE_VARIABLES = frozenset(
    {"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"}
)
_OWNED_PREFIXES = ("SSH_", "BASH_FUNC_", "TORCHELASTIC_", "CLUSTERLAUNCH_")

# Describe the machine they were set on: a glob such as ``*`` skips them, but
# naming one exactly (``--forward-env PATH``) forwards it.
_HOST_SPECIFIC = frozenset(
    {
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PATH",
        "PWD",
        "OLDPWD",
        "HOSTNAME",
        "HOSTTYPE",
        "TERM",
        "DISPLAY",
        "MAIL",
        "TMPDIR",
        "LS_COLORS",
        "PS1",
    }
)
_HOST_SPECIFIC_PREFIXES = ("XDG_",)


def is_valid_name(name: str) -> bool:
    """True for a name a POSIX shell accepts as a variable."""
    return bool(_IDENTIFIER.match(name))


def env_flag(name: str) -> str:
    """``--env NAME=...`` for a message about one ``--env`` word: its value is not shown."""
    return f"--env {name if is_valid_name(name) else shown(name)}=..."


def refusal(name: str) -> str | None:
    """Why ``name`` may never be set by the user on a remote host, or ``None``.

    Used for explicit settings (hosts file ``env`` and ``--env``): those get a
    clear error rather than a silent skip.
    """
    if not is_valid_name(name):
        return (
            f"{name!r} is not a valid variable name "
            "(letters, digits and _; not starting with a digit)"
        )
    if name in _READ_ONLY:
        return f"{name} is read-only in remote shells"
    if name in _SHELL_OWN:
        return f"{name} is the remote shell's own (/bin/sh sets or counts it), so it cannot travel"
    if name in _DEVICE_VARIABLES:
        return f"{name} is set from each host's devices: list; use that instead"
    if name == "TORCH_ELASTIC_WORKER_IDENTICAL":  # the preflight finds it set on a host too
        return "TORCH_ELASTIC_WORKER_IDENTICAL breaks hosts with different process counts"
    if name in _OWNED_EXACT:
        return f"{name} is set by torchrun for every worker"
    if name.startswith("PET_") and name == name.upper():  # torchrun reads PET_<DEST>, unchecked
        option = "--" + name[4:].lower().replace("_", "-")
        return f"{name} sets torchrun's {option}; give torchrun options with --torchrun-args"
    for prefix in _OWNED_PREFIXES:
        if name.startswith(prefix):
            return f"{prefix}* variables are owned by the SSH session, torchrun or clusterlaunch"
    return None


def _host_specific(name: str) -> bool:
    return name in _HOST_SPECIFIC or name.startswith(_HOST_SPECIFIC_PREFIXES)


def forwarded(patterns: Iterable[str], local_env: Mapping[str, str]) -> dict[str, str]:
    """Variables of ``local_env`` selected by ``--forward-env`` glob ``patterns``.

    Refused names (see :func:`refusal`) are always skipped; host-specific ones
    (``PATH``, ``HOME``, ...) only travel when a pattern names them exactly.
    Result is in sorted order so the remote command is reproducible.
    """
    chosen: dict[str, str] = {}
    pattern_list = list(patterns)
    for name in sorted(local_env):
        if refusal(name) is not None:
            continue
        exact = name in pattern_list
        if exact or (
            not _host_specific(name) and any(fnmatch.fnmatchcase(name, p) for p in pattern_list)
        ):
            chosen[name] = local_env[name]
    return chosen


def sent_by_ssh(
    send_env: Iterable[str], set_env: Iterable[tuple[str, str]], local_env: Mapping[str, str]
) -> dict[str, str]:
    """What ssh sends a session (clientloop.c ``client_session2_setup``): every local
    variable a ``SendEnv`` pattern names (``*`` and ``?`` only, ssh's ``match_pattern``),
    then ``SetEnv``'s, which the server applies later (so they win). The server keeps
    what its ``AcceptEnv`` allows; the user's SSH config named them, as for plain ssh."""
    patterns = [re.compile(glob_regex(pattern)) for pattern in send_env]
    sent = {k: v for k, v in local_env.items() if any(p.fullmatch(k) for p in patterns)}
    sent.update(set_env)
    return sent


def glob_regex(pattern: str) -> str:
    """ssh's ``match_pattern`` glob as a regular expression: ``*`` and ``?`` only."""
    return "".join({"*": ".*", "?": "."}.get(char, re.escape(char)) for char in pattern)


def merge(*layers: Mapping[str, str]) -> dict[str, str]:
    """Merge environment layers, later layers winning, keeping first-seen order."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    return merged
