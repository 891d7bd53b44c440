"""``SLURM_JOB_NODELIST`` and ``SLURM_JOB_ID``: their syntax checked, the node list expanded.

Slurm writes a node list as comma-separated entries, each names and bracketed
ranges (``gpu[01-03,07]``, ``rack[1-2]-n[01-02]``). ClusterShell and
``scontrol show hostnames`` both read an unbalanced bracket as a name
character and succeed (``n[1-2`` gave the node ``n]``), so the syntax is
checked here first, and every name then meets the rules a hosts file's names
meet (no leading ``-``: srun's ``-w`` and torchrun's ``--master-addr`` would
read it as an option).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from clusterlaunch.core import limits
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.hostnames import host_name_problem
from clusterlaunch.core.hostranges import HostRangeError, expand_hosts

NODELIST_VAR = "SLURM_JOB_NODELIST"
JOB_ID_VAR = "SLURM_JOB_ID"

# Characters Slurm node names and host lists use. Anything else (notably
# ClusterShell's set operators ! & ^ and its @group syntax) is refused rather
# than given a meaning Slurm never meant.
_NODELIST_CHARS = re.compile(r"[A-Za-z0-9._\-\[\],]+")
_RANGE = r"[0-9]+(?:-[0-9]+)?"
_ENTRY = re.compile(rf"(?:[A-Za-z0-9._\-]+|\[{_RANGE}(?:,{_RANGE})*\])+")
# Slurm's job ids are numbers (an array task or a het component has its own
# number in SLURM_JOB_ID; srun --jobid takes nothing else).
_JOB_ID = re.compile(r"[0-9]{1,10}")
_EXAMPLE = "names and ranges like gpu[01-04],cpu7"

Expand = Callable[[str], list[str]]


def job_id(env: Mapping[str, str]) -> str:
    """The allocation's job id, which every step names (``srun --jobid``).

    Without it srun would not start a step of this allocation but a new
    one-node job of its own, outside the allocation, for every host.
    """
    if env.get(NODELIST_VAR) is None:
        raise UsageError(
            f"not inside a Slurm allocation ({NODELIST_VAR} unset); "
            "run under salloc/sbatch or pass a hosts file"
        )
    text = env.get(JOB_ID_VAR)
    if text is None:
        raise UsageError(
            f"not inside a Slurm allocation ({JOB_ID_VAR} unset, though {NODELIST_VAR} is "
            "set: srun would make a new job for every node); run under salloc/sbatch, "
            f"set {JOB_ID_VAR} to the allocation's job id, or pass a hosts file"
        )
    if not _JOB_ID.fullmatch(text):
        raise UsageError(
            f"{JOB_ID_VAR}={limits.shown(text)}: not a Slurm job id (a number, as salloc "
            f"and sbatch set it); unset it or set the allocation's id ({NODELIST_VAR}: "
            f"{limits.shown(env[NODELIST_VAR])})"
        )
    return text


def expand_nodelist(text: str, expand: Expand = expand_hosts) -> list[str]:
    """Expand a Slurm host list, keeping the order of its comma-separated parts.

    ClusterShell sorts a whole NodeSet, so each top-level part is expanded on
    its own (``b[1-2],a1`` stays ``b1 b2 a1``, as Slurm ordered the nodes).
    """
    where = f"{NODELIST_VAR}={limits.shown(text)}"
    if not text:
        raise UsageError(f"{where}: no nodes; run under salloc/sbatch or pass a hosts file")
    if not _NODELIST_CHARS.fullmatch(text):
        raise UsageError(
            f"{where}: unexpected characters for a Slurm node list "
            f"(expected {_EXAMPLE}); pass a hosts file instead"
        )
    names: list[str] = []
    for part in split_nodelist(text):
        if not _ENTRY.fullmatch(part):
            raise UsageError(
                f"{where}: cannot read {limits.shown(part)} (unbalanced or nested brackets, "
                f"or a range that is not numbers; expected {_EXAMPLE}); pass a hosts file instead"
            )
        try:
            names.extend(expand(part))
        except HostRangeError as exc:
            raise UsageError(f"{where}: {exc}; or pass a hosts file") from None
    _check_names(names, where)
    return names


def _check_names(names: list[str], where: str) -> None:
    seen: set[str] = set()
    for name in names:
        problem = host_name_problem(name)
        if problem is not None:
            raise UsageError(
                f"{where}: node {limits.shown(name)} {problem}; pass a hosts file instead"
            )
        if name in seen:
            raise UsageError(f"{where}: lists node {name} twice; list each node once")
        seen.add(name)


def split_nodelist(text: str) -> list[str]:
    """Split ``text`` at the commas outside brackets (``a[1,3],b`` → ``a[1,3]``, ``b``)."""
    parts: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    empty = [p for p in parts if not p]
    if empty:
        raise UsageError(f"{NODELIST_VAR}={limits.shown(text)}: empty entry between commas")
    return parts
