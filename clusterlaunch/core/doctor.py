"""``clusterlaunch doctor``'s judgement: from what every host reported to findings (pure).

The hosts report facts only (``clusterlaunch/remote/hostfacts.py``,
``remote/doctor.py``); everything that decides what is wrong is here, tested
by equality with made-up reports. Each finding names its host, or its pair of
hosts and the direction, and says what to do.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from clusterlaunch.core import defaults
from clusterlaunch.core.rankdisk import low_space

Level = Literal["error", "warning"]
# Mismatches that make a job fail or hang are errors; the rest may be fine.
VERSION_KEYS: tuple[tuple[str, str, Level], ...] = (
    ("torch", "torch", "error"),
    ("cuda", "CUDA runtime (torch.version.cuda)", "error"),
    ("nccl", "NCCL", "error"),
    ("python", "Python", "warning"),
    ("driver", "NVIDIA driver", "warning"),
    ("gpu_model", "GPU model", "warning"),
)


@dataclass(frozen=True)
class Finding:
    """One verdict line: ``error: node2: ...``."""

    level: Level
    where: str
    text: str

    def line(self) -> str:
        return f"{self.level}: {self.where}: {self.text}"


@dataclass(frozen=True)
class HostCheck:
    """What the controller learnt about one host."""

    host: str
    reached_at: tuple[str, ...]
    """The addresses peers reach this host at (its ``addr``, resolved by the controller)."""
    facts: Mapping[str, Any] | None = None
    """The host's ``facts`` stage; None when it sent none (see ``problem``)."""
    problem: str | None = None
    skew: tuple[float, float] | None = None
    """(seconds ahead of the controller, ± uncertainty), from :func:`clock_skew`."""
    pairs: Mapping[str, Mapping[str, Any]] | None = None
    """Peer host → ``{"error", "ms", "addr", "port"}``: this host dialled that peer."""
    extra: dict[str, Any] = field(default_factory=dict)


def clock_skew(sent: float, received: float, remote: float) -> tuple[float, float]:
    """How far the host's clock is ahead, and ± how sure: it read it between ``sent`` and
    ``received`` (the controller's clock), so assume the middle."""
    middle = (sent + received) / 2
    return round(remote - middle, 4), round((received - sent) / 2, 4)


def gpu_model(facts: Mapping[str, Any]) -> str | None:
    """``"2 x NVIDIA H100"``-style summary of the host's GPU models, None without GPUs."""
    names = sorted({str(gpu.get("name")) for gpu in facts.get("gpus") or []})
    return ", ".join(names) or None


def version_of(facts: Mapping[str, Any], key: str) -> Any:
    if key == "gpu_model":
        return gpu_model(facts)
    if key == "driver":
        drivers = sorted({str(gpu.get("driver")) for gpu in facts.get("gpus") or []})
        return ", ".join(drivers) or None
    value = facts.get(key)
    return None if isinstance(value, dict) else value  # {"error": ...}: not a version


def judge(checks: Sequence[HostCheck]) -> list[Finding]:
    """Every finding, host by host, then across hosts."""
    findings: list[Finding] = []
    multi_host = len(checks) > 1
    for check in checks:
        if check.facts is None:
            why = check.problem or "no report"
            findings.append(Finding("error", check.host, f"the doctor got no report: {why}"))
            continue
        findings += own_name(check, multi_host)
        findings += ifname_findings(check)
        findings += host_findings(check)
    findings += version_mismatches(checks)
    findings += pair_findings(checks)
    return findings


def own_name(check: HostCheck, multi_host: bool) -> list[Finding]:
    """The host's name resolving to loopback (Debian's ``127.0.1.1 HOSTNAME``) while peers
    reach it elsewhere: gloo binds to that address and tells its peers to dial it."""
    facts = check.facts or {}
    name = facts.get("hostname")
    resolved = list(facts.get("resolves_to") or [])
    if facts.get("resolve_error"):
        return [
            Finding(
                "warning",
                check.host,
                f"its name {name!r} does not resolve ({facts['resolve_error']}); gloo "
                "falls back to loopback: add it to /etc/hosts or set GLOO_SOCKET_IFNAME",
            )
        ]
    if not multi_host or not resolved or not all(_loopback(a) for a in resolved):
        return []
    if set(resolved) & set(check.reached_at) or all(_loopback(a) for a in check.reached_at):
        return []  # peers that reach it over loopback are on this machine: loopback works
    gloo_pinned = (facts.get("ifname_env") or {}).get("GLOO_SOCKET_IFNAME")
    level: Level = "warning" if gloo_pinned else "error"
    return [
        Finding(
            level,
            check.host,
            f"its name {name!r} resolves to {', '.join(resolved)} (loopback) there, but peers "
            f"reach it at {', '.join(check.reached_at)}: gloo and the c10d store would give "
            "peers the loopback address and init hangs; map the name to the host's real "
            "address in /etc/hosts (Debian adds '127.0.1.1 NAME'), or set GLOO_SOCKET_IFNAME",
        )
    ]


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_loopback
    except ValueError:
        return False


def nccl_selected(value: str, names: Sequence[str]) -> list[str]:
    """Interfaces ``NCCL_SOCKET_IFNAME=value`` selects among ``names``, as NCCL reads it:
    comma-separated prefixes, ``=NAME`` an exact name, a leading ``^`` excludes instead."""
    exclude = value.startswith("^")
    patterns = [p for p in (value[1:] if exclude else value).split(",") if p]

    def matches(name: str) -> bool:
        return any(name == p[1:] if p.startswith("=") else name.startswith(p) for p in patterns)

    return [name for name in names if matches(name) != exclude]


def ifname_findings(check: HostCheck) -> list[Finding]:
    """``NCCL_SOCKET_IFNAME``/``GLOO_SOCKET_IFNAME`` in the job's environment naming
    interfaces the host lacks: NCCL then finds no interface, gloo fails at init."""
    facts = check.facts or {}
    env = facts.get("ifname_env") or {}
    names = sorted(facts.get("interfaces") or {})
    found = []
    nccl = env.get("NCCL_SOCKET_IFNAME")
    if nccl and not nccl_selected(nccl, names):
        found.append(
            Finding(
                "error",
                check.host,
                f"NCCL_SOCKET_IFNAME={nccl} selects none of its interfaces "
                f"({', '.join(names)}); set it per host (env: in the hosts file)",
            )
        )
    gloo = env.get("GLOO_SOCKET_IFNAME")
    missing = [name for name in (gloo or "").split(",") if name and name not in names]
    if missing:
        found.append(
            Finding(
                "error",
                check.host,
                f"GLOO_SOCKET_IFNAME={gloo}: no interface {', '.join(missing)} here "
                f"({', '.join(names)}); set it per host (env: in the hosts file)",
            )
        )
    return found


def host_findings(check: HostCheck) -> list[Finding]:
    """One host's own checks: its listener, route to the master, clock, disks, busy GPUs."""
    facts = check.facts or {}
    found = []
    for key in ("listen_error", "route_error", "disk_error", "gpu_error"):
        if facts.get(key):
            level: Level = "warning" if key == "disk_error" else "error"
            found.append(Finding(level, check.host, str(facts[key])))
    if check.skew is not None and abs(check.skew[0]) - check.skew[1] > defaults.DOCTOR_CLOCK_SKEW_S:
        found.append(
            Finding(
                "warning",
                check.host,
                f"its clock is {check.skew[0]:+.2f} s off the controller's: timestamps in "
                "logs and traces will not line up; run NTP (chrony, systemd-timesyncd)",
            )
        )
    free = facts.get("disk_free_bytes")
    if isinstance(free, int) and free < defaults.DOCTOR_MIN_FREE_DISK:
        found.append(
            Finding(
                "warning",
                check.host,
                f"only {free / 2**20:.0f} MiB free in the workdir {facts.get('workdir')}",
            )
        )
    if low := low_space(facts.get("rank_files"), check.host):  # torchrun's per-rank files
        found.append(Finding("warning", check.host, low))
    for app in facts.get("gpu_processes") or []:
        found.append(
            Finding(
                "warning",
                check.host,
                f"pid {app.get('pid')} ({app.get('name')}) holds {app.get('memory_mib')} MiB "
                "of GPU memory: a job still running, or a leftover?",
            )
        )
    return found


def version_mismatches(checks: Sequence[HostCheck]) -> list[Finding]:
    """One finding per version that differs across hosts, naming which host has which."""
    found = []
    reported = [c for c in checks if c.facts is not None]
    for key, label, level in VERSION_KEYS:
        hosts_by_version: dict[str, list[str]] = {}
        for check in reported:
            value = version_of(check.facts or {}, key)
            hosts_by_version.setdefault(str(value) if value else "none", []).append(check.host)
        if len(hosts_by_version) > 1:
            parts = [f"{v} on {', '.join(hosts)}" for v, hosts in hosts_by_version.items()]
            where = "all hosts"
            found.append(Finding(level, where, f"{label} differs: {'; '.join(parts)}"))
    return found


def pair_findings(checks: Sequence[HostCheck]) -> list[Finding]:
    """Every pair that could not connect: ``a -> b``, or ``a <-> b`` when neither direction did."""
    found = []
    ready = [c for c in checks if c.facts is not None and c.facts.get("port")]
    failed: dict[tuple[str, str], str] = {}
    for check in ready:
        if check.pairs is None:
            found.append(Finding("error", check.host, "did not finish the all-pairs check"))
            continue
        for peer in ready:
            result = check.pairs.get(peer.host) or {"error": "not checked"}
            if peer.host != check.host and result.get("error"):
                failed[(check.host, peer.host)] = str(result["error"])
    advice = (
        "collectives open ephemeral ports between every pair of hosts: let TCP through "
        "between them on all ports, not only the master port"
    )
    for (source, target), error in failed.items():
        if (target, source) in failed and target < source:
            continue  # reported with the other direction
        both = (target, source) in failed
        where = f"{source} <-> {target}" if both else f"{source} -> {target}"
        what = f"neither can connect to the other ({error})" if both else error
        found.append(Finding("error", where, f"{what}; {advice}"))
    return found


def pair_matrix(checks: Sequence[HostCheck]) -> dict[str, dict[str, bool | None]]:
    """``matrix[src][dst]``: src reached dst's ephemeral port (None: not checked)."""
    matrix: dict[str, dict[str, bool | None]] = {}
    for check in checks:
        row: dict[str, bool | None] = {}
        for peer in checks:
            if peer.host == check.host or check.pairs is None or peer.host not in check.pairs:
                row[peer.host] = None
            else:
                row[peer.host] = not check.pairs[peer.host].get("error")
        matrix[check.host] = row
    return matrix


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all_reduce bus bandwidth: ``algbw * 2 (n - 1) / n``."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 0 else 0.0


def all_reduce_rows(timings: Sequence[Mapping[str, Any]], ranks: int) -> list[dict[str, Any]]:
    """``{bytes, seconds}`` per size (mean time of one all_reduce) → algbw/busbw in GB/s."""
    rows = []
    for timing in timings:
        size, seconds = int(timing["bytes"]), float(timing["seconds"])
        algbw = size / seconds / 1e9 if seconds > 0 else 0.0
        rows.append(
            {
                "bytes": size,
                "seconds": seconds,
                "algbw_gbps": round(algbw, 4),
                "busbw_gbps": round(bus_bandwidth(algbw, ranks), 4),
            }
        )
    return rows
