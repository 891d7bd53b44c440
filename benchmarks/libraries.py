"""What a connection costs the controller in each SSH library: 32 hosts at once.

Why: the controller's CPU per host with paramiko (the ``cpu`` rows) misses its
target, and *Controller cost per host* in docs/benchmarks.md names the ways
out: another client design, or an SSH library in C. This measures them instead
of guessing. Each library, in a process of its own
(:mod:`benchmarks.sshlibs_client`), connects to 1 and then to 32 hosts of the
harness's cluster at once, checks each host key against known_hosts,
authenticates with the cluster's key, runs ``true`` and waits for its exit
status; all with the same algorithms (curve25519, ed25519, aes128-ctr,
hmac-sha2-256). The libraries alternate which goes first, round after round.

Rows, per library (paramiko by hand is the baseline of the ratio column):

* **CPU per connection, 32 at once**: the process's own CPU for the 32, / 32,
  the import excluded (``extra``: the 1-host run before it, walls);
* **import and key load**: the CPU of importing the library (what the
  controller's start pays for it); for ``clusterlaunch``, its transport's
  modules and resolving the 32 hosts through the SSH config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.core import Result, rotate
from benchmarks.env import Bench
from benchmarks.processes import BenchError

NAME = "libraries"
NEEDS = 32
"""How many simulated hosts this measurement uses."""
LIBRARIES = ("paramiko", "clusterlaunch", "asyncssh", "libssh", "libssh2")
BASELINE = "paramiko"
WHAT = {
    "paramiko": "paramiko by hand",
    "clusterlaunch": "clusterlaunch's transport",
    "asyncssh": "asyncssh (one event loop)",
    "libssh": "libssh (C, ssh-python)",
    "libssh2": "libssh2 (C, ssh2-python)",
}
"""Row labels; docs/benchmarks.md (*What is measured*) says how each one connects."""


def write_spec(bench: Bench, count: int) -> Path:
    """The first ``count`` hosts, the user, key and files, as the worker reads them."""
    cluster = bench.cluster
    assert cluster is not None
    hosts = [
        {"alias": host.name, "addr": host.addr, "port": host.port} for host in cluster.hosts[:count]
    ]
    spec = {
        "hosts": hosts,
        "user": cluster.user,
        "key": str(cluster.client_key),
        "known_hosts": str(cluster.known_hosts),
        "ssh_config": str(cluster.ssh_config),
    }
    path = bench.tmp / f"sshlibs-{count}.json"
    path.write_text(json.dumps(spec))
    return path


def connect(bench: Bench, library: str, spec: Path, count: int) -> dict[str, Any]:
    """One worker run: its record, checked (every host's ``true`` exited 0)."""
    out = bench.tmp / f"sshlibs-{library}-{count}.out.json"
    out.unlink(missing_ok=True)
    bench.run(
        [bench.python, "-m", "benchmarks.sshlibs_client", library, str(spec), str(out)]
    ).check()
    try:
        record: dict[str, Any] = json.loads(out.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{library} on {count} hosts left no record: {exc}") from None
    if record["statuses"] != [0] * count:
        raise BenchError(f"{library} on {count} hosts: exit statuses {record['statuses']}")
    return record


def run(bench: Bench) -> list[Result]:
    """Every library, 1 host then 32, ``repeat`` rounds after a warm-up."""
    specs = {count: write_spec(bench, count) for count in (1, NEEDS)}
    records: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {
        library: [] for library in LIBRARIES
    }
    for index in bench.rounds(NAME):
        for library in rotate(LIBRARIES, index):
            one = connect(bench, library, specs[1], 1)
            many = connect(bench, library, specs[NEEDS], NEEDS)
            if index >= 0:
                records[library].append((one, many))
    rows = [row for library in LIBRARIES for row in _rows(library, records[library])]
    rows[0].problems += bench.assert_clean()
    return rows


def _rows(library: str, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[Result]:
    per = Result(
        f"{NAME}.{library}",
        NAME,
        f"{WHAT[library]}: CPU / connection, {NEEDS} at once",
        "ms",
        samples=[1000 * many["cpu_s"] / NEEDS for _, many in pairs],
    )
    per.extra = {
        "one_host_cpu_ms": [round(1000 * one["cpu_s"], 2) for one, _ in pairs],
        "wall_s": [round(many["wall_s"], 3) for _, many in pairs],
    }
    imported = Result(
        f"{NAME}.{library}.import",
        NAME,
        f"{WHAT[library]}: import and key load, CPU",
        "ms",
        samples=[1000 * many["import_cpu_s"] for _, many in pairs],
        role="info",
    )
    if library == BASELINE:
        per.role = "baseline"
    else:
        per.baseline = f"{NAME}.{BASELINE}"
        if library != "clusterlaunch":
            per.role = "info"
    return [per, imported]


__all__ = ["NAME", "run"]
