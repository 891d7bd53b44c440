"""Job-level restarts, decided without the network: restart or not, which hosts, which layout.

The controller (:mod:`clusterlaunch.controller.restarts`) runs an attempt, hands
its :class:`~clusterlaunch.core.errors.JobOutcome` here, and asks whether to go
on; for the next attempt it hands over which hosts passed the new connect and
preflight, and gets back the hosts in node-rank order. Every attempt is
planned from the hosts file again, so a host that comes back takes its own
place back, and a spare goes idle again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusterlaunch.core import defaults
from clusterlaunch.core.errors import HostsFileError, JobOutcome
from clusterlaunch.core.hostfields import as_int
from clusterlaunch.core.hostnames import shown
from clusterlaunch.core.limits import MAX_RESTARTS
from clusterlaunch.core.model import HostSpec
from clusterlaunch.core.yamlines import key_line, written

_MAX_WAIT = defaults.RESTART_BACKOFF_MAX_S
RESTART_COUNT_VAR = "CLUSTERLAUNCH_RESTART_COUNT"
"""In every rank's environment when the job may restart: 0 in the first attempt, then 1, 2 ...
(torchrun's ``TORCHELASTIC_RESTART_COUNT`` counts only its own worker restarts)."""


@dataclass(frozen=True)
class RestartPolicy:
    """``--max-restarts``, ``--restart-backoff`` and ``--min-hosts``, resolved."""

    max_restarts: int = 0
    backoff: float = defaults.RESTART_BACKOFF_S
    """Seconds before the first restart; doubled for each further one."""
    min_hosts: int = 1
    """Hosts a restarted job needs at least (default: every non-spare host)."""

    @property
    def enabled(self) -> bool:
        return self.max_restarts > 0

    @property
    def max_wait(self) -> float:
        """The longest back-off: 60 s, or the first one when that is longer (never cut)."""
        return max(_MAX_WAIT, self.backoff)


class TooFewHosts(Exception):
    """A restart found fewer usable hosts than ``--min-hosts``: the job ends (255)."""


@dataclass(frozen=True)
class Layout:
    """The hosts of one attempt, in node-rank order, and how they differ from the file's."""

    hosts: tuple[HostSpec, ...]
    replaced: tuple[tuple[str, str], ...] = ()
    """(lost host, the spare in its place)."""
    dropped: tuple[str, ...] = ()
    """Hosts of the file that are not in this attempt, and no spare took their place."""
    replanned: bool = False
    """The ranks moved: a host dropped, or a spare with another process count."""


def count_env(restart_count: int | None) -> dict[str, str]:
    """The restart count variable for the planner; nothing for a job that never restarts."""
    return {} if restart_count is None else {RESTART_COUNT_VAR: str(restart_count)}


def refusal(outcome: JobOutcome, restarts_done: int, policy: RestartPolicy) -> str | None:
    """Why the job must not restart after ``outcome``; ``None``: restart it.

    Only a failure restarts (a rank's non-zero exit, a lost host): never a
    success, nor what clusterlaunch itself was asked to do (Ctrl-C, SIGTERM,
    ``kill``, ``--timeout``), and never beyond ``--max-restarts``.
    """
    if outcome.exit_code == 0:
        return "the job succeeded"
    if outcome.stopped:
        return "the job was stopped, not failed"
    if restarts_done >= policy.max_restarts:
        return f"--max-restarts {policy.max_restarts} used up"
    return None


def backoff_s(policy: RestartPolicy, restart: int) -> float:
    """Seconds to wait before restart number ``restart`` (1, 2, ...): doubling, capped."""
    return float(min(policy.backoff * 2 ** max(restart - 1, 0), policy.max_wait))


def choose_layout(
    hosts: Sequence[HostSpec],
    spares: Sequence[HostSpec],
    usable: Collection[str],
    min_hosts: int,
    why_not: Mapping[str, str] | None = None,
) -> Layout:
    """The hosts of the next attempt: each file host that is ``usable``, else a usable spare.

    A spare takes the lost host's node rank; with the same process count the
    rank layout and the world size stay as they were, with another count the
    ranks are re-planned. Without a spare the host is dropped, and the job
    shrinks if ``min_hosts`` allows (node 0 dropped: the next host is the
    master). ``why_not`` (host → reason) goes into the :class:`TooFewHosts`
    message.
    """
    free = [spare for spare in spares if spare.host in usable]
    chosen: list[HostSpec] = []
    replaced: list[tuple[str, str]] = []
    dropped: list[str] = []
    replanned = False
    for spec in hosts:
        if spec.host in usable:
            chosen.append(spec)
        elif free:
            spare = free.pop(0)
            chosen.append(spare)
            replaced.append((spec.host, spare.host))
            replanned = replanned or spare.gpus != spec.gpus or spare.gpus is None
        else:
            dropped.append(spec.host)
            replanned = True
    if len(chosen) < min_hosts:
        unusable_spares = [spare.host for spare in spares if spare.host not in usable]
        raise TooFewHosts(_too_few(len(chosen), min_hosts, dropped, unusable_spares, why_not))
    return Layout(tuple(chosen), tuple(replaced), tuple(dropped), replanned)


def _too_few(
    usable: int,
    min_hosts: int,
    dropped: Sequence[str],
    spares: Sequence[str],
    why_not: Mapping[str, str] | None,
) -> str:
    """One line: each host left out with its reason, then each spare that was tried and
    could not take a place (else the user never learns the spare failed too)."""
    reasons = why_not or {}
    missing = ", ".join(f"{h} ({reasons.get(h, 'unusable')})" for h in dropped)
    missing += "".join(f"; spare {h} ({reasons.get(h, 'unusable')})" for h in spares)
    return f"only {usable} usable host(s), --min-hosts is {min_hosts}: {missing}"


def layout_text(layout: Layout, world_size: int | None) -> str:
    """One line for the console and controller.log: who is in, who is out, the world size."""
    parts = [f"{h} replaced by spare {s}" for h, s in layout.replaced]
    parts += [f"{h} dropped" for h in layout.dropped]
    changes = "; ".join(parts) if parts else "same hosts"
    world = "auto" if world_size is None else str(world_size)
    ranks = "ranks re-planned" if layout.replanned else "same rank layout"
    return f"{changes}; {len(layout.hosts)} host(s), world size {world} ({ranks})"


def dry_run_text(
    policy: RestartPolicy,
    hosts: Sequence[HostSpec],
    spares: Sequence[HostSpec],
    master_addr: str | None = None,
) -> str:
    """The restart policy and the spares, as comment lines under the dry-run plan."""
    if not policy.enabled and not spares:
        return ""
    lines = []
    if policy.enabled:
        lines.append(
            f"# restarts: up to {policy.max_restarts} after a failed rank or a lost host, "
            f"waiting {policy.backoff:g} s (doubling, at most {policy.max_wait:g} s); "
            f"at least {policy.min_hosts} host(s); {RESTART_COUNT_VAR} in every rank's environment"
        )
        warning = localhost_master_risk(policy, hosts, spares, master_addr)
        lines += [f"# restarts: {warning}"] if warning else []
    else:
        lines.append("# restarts: none (--max-restarts 0): the spares stay idle")
    for spare in spares:
        lines.append(
            f"# spare {spare.host} ({_count(spare.gpus)} process(es)): {_fit(spare, hosts)}"
        )
    return "\n".join(lines) + "\n"


def dry_run_fields(
    policy: RestartPolicy,
    hosts: Sequence[HostSpec],
    spares: Sequence[HostSpec],
    master_addr: str | None = None,
) -> dict[str, Any]:
    """The same for ``--dry-run --json``: ``restarts`` and ``spares``, present only when set."""
    fields: dict[str, Any] = {}
    if policy.enabled:
        fields["restarts"] = {
            "max_restarts": policy.max_restarts,
            "backoff_s": policy.backoff,
            "max_backoff_s": policy.max_wait,
            "min_hosts": policy.min_hosts,
        }
        warning = localhost_master_risk(policy, hosts, spares, master_addr)
        if warning:
            fields["restarts"]["warning"] = warning
    if spares:
        fields["spares"] = [
            {
                "host": spare.host,
                "nproc": spare.gpus or "auto",
                "takes_place": _keeps_layout(spare, hosts),
                "note": _fit(spare, hosts),
            }
            for spare in spares
        ]
    return fields


def localhost_master_risk(
    policy: RestartPolicy,
    hosts: Sequence[HostSpec],
    spares: Sequence[HostSpec],
    master_addr: str | None,
) -> str | None:
    """A restart that must fail: dropping the hosts before a ``localhost`` without
    ``addr:`` makes it node 0, which cannot be the master of several hosts (the planner
    refuses that attempt). ``None`` when no restart can get there, or ``master_addr`` is set."""
    if master_addr is not None:
        return None
    for index, spec in enumerate(hosts):
        left = len(hosts) - index  # hosts once those before it are dropped
        if index and spec.is_local and not spec.addr and left >= max(policy.min_hosts, 2):
            before = [h.host for h in hosts[:index]]
            names = ", ".join(before[:3]) + (f" and {len(before) - 3} more" if before[3:] else "")
            unless = " and no spare takes the place" if spares else ""
            where = f"line {spec.line}, " if spec.line is not None else ""
            return (
                f"a restart without {names}{unless} makes localhost ({where}no addr:) node 0, "
                "which cannot be the master of a multi-host job, and fails; set its addr: "
                "(or master_addr:) to an address the other hosts can reach"
            )
    return None


def _keeps_layout(spare: HostSpec, hosts: Sequence[HostSpec]) -> bool:
    """Whether ``spare`` keeps the rank layout in place of any host of the job."""
    return spare.gpus is not None and any(h.gpus == spare.gpus for h in hosts)


def _fit(spare: HostSpec, hosts: Sequence[HostSpec]) -> str:
    same = [h.host for h in hosts if h.gpus == spare.gpus and h.gpus is not None]
    if len(same) == len(hosts):
        return "takes a lost host's node rank and ranks; the world size stays"
    if same:
        return (
            f"keeps the rank layout in place of {', '.join(same)}; "
            "in place of another host the ranks are re-planned"
        )
    return "the process counts differ: ranks are re-planned when it takes a host's place"


def _count(gpus: int | None) -> str:
    return "auto" if gpus is None else str(gpus)


def spare_field(entry: Mapping[str, Any], path: str, field: str) -> bool:
    """A host entry's ``spare:``: true or false (unset or null: false)."""
    value = entry.get("spare")
    if value is None:
        return False
    if not isinstance(value, bool):
        raise HostsFileError(
            path, key_line(entry, "spare"), field, f"must be true or false, got {shown(value)}"
        )
    return value


def max_restarts_field(data: Mapping[str, Any], path: str) -> int | None:
    """The hosts file's ``max_restarts:`` (``--max-restarts`` wins); None: not given."""
    if data.get("max_restarts") is None:
        return None
    number = as_int(data["max_restarts"])
    if number is None or not 0 <= number <= MAX_RESTARTS:
        got = written(data, "max_restarts") or shown(data["max_restarts"])
        raise HostsFileError(
            path,
            key_line(data, "max_restarts"),
            "max_restarts",
            f"must be a whole number 0-{MAX_RESTARTS:,}, got {got}",
        )
    return number
