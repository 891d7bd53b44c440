"""Resolve hosts with ``ssh -G``: for configs only the OpenSSH client can evaluate.

``Match exec`` runs a command to decide whether a block applies; paramiko
would need the ``invoke`` package and still run it differently from ssh. Nor
does paramiko know newer Match criteria or follow DNS aliases
(:attr:`~clusterlaunch.transport.sshconfig.LoadedConfig.ssh_only`). So for such a
config, each host's options come from ``ssh -G`` (which prints the options ssh
would use, without connecting), one process per host, in parallel. ``ssh -G``
also gives the verdict on a keyword no table here knows (:func:`refusal`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import LOCALHOST, HostSpec, SshTarget
from clusterlaunch.transport import sshtarget
from clusterlaunch.transport.fanout import every_result

_TIMEOUT_S = 30.0
"""``Match exec`` commands are the user's; give them time, but not forever."""
_KEPT = (
    "hostname",
    "port",
    "user",
    "userknownhostsfile",
    "globalknownhostsfile",
    "identitiesonly",
    "hashknownhosts",
    "forwardagent",
    "requiredrsasize",
    "connectionattempts",
)
_KEPT_UNLESS_NONE = ("proxyjump", "proxycommand", "connecttimeout")


def resolve_with_ssh(config: str | None, specs: Sequence[HostSpec], why: str) -> list[SshTarget]:
    """Every host resolved by ``ssh -G [-F config]`` (``why``: the line that needs it)."""
    return every_result(lambda spec: _resolve(config, spec, why), specs, 16, "ssh-G")


def _resolve(config: str | None, spec: HostSpec, why: str) -> SshTarget:
    if spec.host == LOCALHOST:
        return SshTarget(alias=LOCALHOST, hostname=LOCALHOST, port=0, user=spec.user)
    options = ["-p", str(spec.port)] if spec.port else []
    options += ["-l", spec.user] if spec.user else []
    try:
        done = _ssh_g(config, spec.host, options)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{why} needs ssh -G to resolve {spec.host}: {exc}") from None
    if done.returncode != 0:
        raise UsageError(f"{why}: ssh -G {spec.host} failed: {_said(done)}")
    return sshtarget.target_from(parse_options(done.stdout.decode("utf-8", "replace")), spec)


def refusal(config: str | None, host: str) -> str | None:
    """What ``ssh -G`` says where it refuses the config for ``host``, or None: accepted,
    or ssh could not be run (then nothing can be asked)."""
    try:
        done = _ssh_g(config, host)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return _said(done) if done.returncode else None


def _ssh_g(
    config: str | None, host: str, options: Sequence[str] = ()
) -> subprocess.CompletedProcess[bytes]:
    """``ssh -G [-F config] OPTIONS -- host``, run to its end."""
    argv = ["ssh", "-G", *(["-F", config] if config is not None else []), *options, "--", host]
    return subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=_TIMEOUT_S,
        start_new_session=True,  # a Ctrl-C reaches us; we stop it
    )


def _said(done: subprocess.CompletedProcess[bytes]) -> str:
    """ssh's complaint: "FILE: line N: Bad configuration option: x" where it names a line
    (it says more than its last, "terminating, 1 bad configuration options")."""
    said = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return next((line for line in said if " line " in line), said[-1] if said else "no output")


def parse_options(text: str) -> dict[str, Any]:
    """``ssh -G`` output as the option mapping :func:`sshtarget.target_from` reads."""
    found: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key in ("sendenv", "setenv"):  # a line each
            found.setdefault(key, []).append(value)
        elif key in _KEPT or (key in _KEPT_UNLESS_NONE and value != "none"):
            found[key] = value
        elif key == "stricthostkeychecking" and value != "ask":
            found[key] = value  # ssh -G prints "ask", the default, when unset: the default applies
    # Identity files are left to ssh, which reads the same config (-G lists its
    # defaults too, which need not exist).
    return found
