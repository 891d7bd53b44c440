"""The OpenSSH client's argv: the one place that builds it (rsync's ``--rsh``, the
OpenSSH transport's master and session clients).

``-F`` names the config clusterlaunch resolved the host through, and the host is
named by the same alias, so ssh applies the same ``Host`` block; the explicit
options repeat what clusterlaunch decided on top of it (hosts-file user and port,
the host-key policy); the config's own paths (keys, known_hosts) ssh reads and
expands itself. Host keys are always checked (``StrictHostKeyChecking``
is ``yes`` or ``accept-new``, never ``no``), and ``BatchMode`` makes a prompt fail
instead of hang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from clusterlaunch.core.errors import UsageError

if TYPE_CHECKING:  # model.py renders its plans with core/commands.py, which uses this
    from clusterlaunch.core.model import SshTarget

# The session-only keywords of OpenSSH 8.7 and later, and what a launcher must have:
# its ssh is its child until the session ends (ForkAfterAuthentication yes detached
# it, and a master so detached ran on after us), stdin reaches the command
# (StdinNull yes cut it off), and a command runs (SessionType none ran nothing,
# subsystem asked for a subsystem named by the command). Given only where the config
# sets the keyword: an older ssh refuses a keyword it does not know, even after -o.
SESSION_OVERRIDES = {
    "forkafterauthentication": "ForkAfterAuthentication=no",
    "stdinnull": "StdinNull=no",
    "sessiontype": "SessionType=default",
}
SESSION_KEYWORDS = tuple(SESSION_OVERRIDES)

# What a command session never wants from the user's config: port forwards
# (a second client would fight over the ports), X11 (every rank drawing on the
# launching laptop; pdsh passes -x too), a RemoteCommand (ssh refuses one next
# to a command), a LocalCommand, a terminal.
_SESSION_ONLY = [
    "-T",
    "-x",
    "-o",
    "ClearAllForwardings=yes",
    "-o",
    "RemoteCommand=none",
    "-o",
    "PermitLocalCommand=no",
]


@dataclass(frozen=True)
class Mux:
    """Use a master connection's control socket: as the master, or as a client of it."""

    path: str
    master: bool = False


@dataclass(frozen=True)
class Keepalive:
    """``ServerAliveInterval``/``ServerAliveCountMax``: a silent peer is dropped after
    about ``interval × count`` seconds (ssh exits 255, its sessions with it)."""

    interval: int
    count: int


def ssh_argv(
    target: SshTarget,
    *,
    config_file: str | None,
    strict: bool,
    connect_timeout: float,
    mux: Mux | None = None,
    keepalive: Keepalive | None = None,
    proxy_command: str | None = None,
) -> list[str]:
    """The ``ssh`` options that reach ``target`` (the caller adds the alias and command).

    ``proxy_command`` (a shared jump connection) replaces the target's ProxyJump.
    ``config_file``: ssh's ``-F``; None, none: ssh reads its own defaults.
    """
    timeout = target.connect_timeout or connect_timeout
    argv = ["ssh", *(["-F", config_file] if config_file is not None else [])]
    # Only what the hosts file gives, as -p/-l: ssh reads the rest from its config, and a
    # config User given as -l is one its first pass's Match user blocks see, not ssh's.
    if "port" in target.given:
        argv += ["-p", str(target.port)]
    if "user" in target.given and target.user:
        argv += ["-l", target.user]
    # No -i, no UserKnownHostsFile: ssh reads the config's lines itself and expands
    # them as its version does. An expanded path handed back was expanded again: a "%"
    # from "%%" ended ssh ("percent_dollar_expand: failed").
    if target.identities_only:
        argv += ["-o", "IdentitiesOnly=yes"]
    argv += [
        "-o",
        "StrictHostKeyChecking=" + ("yes" if strict else "accept-new"),
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, math.ceil(timeout))}",
    ]
    if proxy_command:
        argv += ["-o", f"ProxyCommand={proxy_command}"]
    elif target.proxy_jump:
        argv += ["-o", f"ProxyJump={target.proxy_jump}"]
    if keepalive is not None:
        argv += ["-o", f"ServerAliveInterval={keepalive.interval}"]
        argv += ["-o", f"ServerAliveCountMax={keepalive.count}"]
    argv += _mux_options(mux) if mux is not None else _NO_MASTER
    return argv + _session_overrides(target, master=mux is not None and mux.master) + _SESSION_ONLY


# An ssh of its own (rsync's under the paramiko client, a later ProxyJump hop) never
# becomes a master: under the user's ControlMaster auto and ControlPersist yes it left
# one running after the job. It still uses a master the user has running.
_NO_MASTER = ["-o", "ControlMaster=no"]


def _session_overrides(target: SshTarget, *, master: bool) -> list[str]:
    """``-o`` for each session-only keyword the config sets; a master's ``-N`` is its
    session type (``-N`` after ``-o SessionType=default``: ssh refuses the pair)."""
    argv: list[str] = []
    for keyword in target.session_keywords:
        if not (master and keyword == "sessiontype"):
            argv += ["-o", SESSION_OVERRIDES[keyword]]
    return argv


def subsystem_session(argv: list[str]) -> list[str]:
    """``argv`` (:func:`ssh_argv`'s) for a subsystem session: its ``SessionType`` override
    turned to ``subsystem``, or ``-s`` (ssh refuses ``-s`` after ``SessionType=default``)."""
    if "SessionType=default" in argv:
        return [word if word != "SessionType=default" else "SessionType=subsystem" for word in argv]
    return [*argv, "-s"]


def _mux_options(mux: Mux) -> list[str]:
    path = _ssh_option_word(mux.path)
    if "%" in mux.path:
        raise UsageError(f"{mux.path!r}: a control socket path cannot contain '%'")
    if mux.master:
        # The master runs in the foreground, as our child, until we end it
        # (ControlPersist no): nothing outlives the job. Its stderr goes to a
        # file of ours: at INFO it also says why it ended ("Timeout, server
        # not responding"), which a user's LogLevel ERROR would hide.
        return [
            "-o", "ControlMaster=yes", "-o", "ControlPersist=no", "-o", f"ControlPath={path}",
            "-o", "LogLevel=INFO",
        ]  # fmt: skip
    return ["-o", "ControlMaster=no", "-o", f"ControlPath={path}"]


def _ssh_option_word(word: str) -> str:
    """One value of a multi-valued ``-o`` option: ssh splits on spaces outside double quotes."""
    if '"' in word or "\n" in word:
        raise UsageError(f"{word!r}: ssh cannot take a file name with '\"' or a newline")
    return f'"{word}"' if " " in word or "\t" in word else word
