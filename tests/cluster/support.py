"""Helpers for tests that run the real ``clusterlaunch`` CLI against simulated hosts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from clusterlaunch.testing import LoopbackCluster, find_processes

# The interpreter the hosts run jobs with: scripts/test.sh points it at its venv.
PYTHON = os.environ.get("CLUSTERLAUNCH_TEST_PYTHON", sys.executable)
WORKERS = Path(__file__).parent / "workers"
REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^\[r(\d+) (\S+):(\d+)\] +(.*)$")


def write_hosts(path: Path, hosts: Sequence[tuple[Any, ...]]) -> Path:
    """A hosts file of ``(host, gpus[, {key: value}])`` entries, using the test interpreter."""
    lines = ["defaults:", f"  python: {json.dumps(PYTHON)}", "hosts:"]
    for host, gpus, *extra in hosts:
        lines += [f"  - host: {host}", f"    gpus: {gpus}"]
        for key, value in (extra[0] if extra else {}).items():
            lines.append(f"    {key}: {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def recorded_key(cluster: LoopbackCluster, name: str) -> str:
    """``TYPE BASE64`` of host ``name``'s key, as the cluster's known_hosts records it."""
    lines = dict(line.split(" ", 1) for line in cluster.known_hosts.read_text().splitlines())
    host = cluster.host(name)
    return lines[f"[{host.addr}]:{host.port}"]


def cli_argv(command: str, cluster: LoopbackCluster | None, *args: str) -> list[str]:
    """``python -m clusterlaunch COMMAND --ssh-config ... ARGS``."""
    argv = [PYTHON, "-m", "clusterlaunch", command]
    if cluster is not None:
        argv += ["--ssh-config", str(cluster.ssh_config)]
    return argv + list(args)


def run_cli(
    command: str,
    cluster: LoopbackCluster | None,
    *args: str,
    timeout: float = 120,
    cwd: Path = WORKERS,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion, by default from the workers' directory (the remote workdir).

    ``prefix``: what runs it (a mount namespace: tests/mountns.py).
    """
    result = run_cli_bytes(command, cluster, *args, timeout=timeout, cwd=cwd, prefix=prefix)
    # Decoded without universal newlines, which would turn "\r" into "\n".
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8", "replace"),
        result.stderr.decode("utf-8", "replace"),
    )


def exec_echo_hi(
    client: str,
    hosts: Path,
    *options: str,
    config: Path | None = None,
    cluster: LoopbackCluster | None = None,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """``clusterlaunch exec --ssh-client CLIENT [OPTIONS] [--ssh-config CONFIG] HOSTS --
    echo hi``: how the SSH tests see a client reach the hosts as ``ssh`` did."""
    own = ("--ssh-config", str(config)) if config is not None else ()
    args = ("--ssh-client", client, *options, *own, str(hosts), "--", "echo", "hi")
    return run_cli("exec", cluster, *args, timeout=120, prefix=prefix)


def run_cli_bytes(
    command: str,
    cluster: LoopbackCluster | None,
    *args: str,
    timeout: float = 120,
    cwd: Path = WORKERS,
    prefix: Sequence[str] = (),
) -> subprocess.CompletedProcess[bytes]:
    """Like :func:`run_cli`, with stdout and stderr as the exact bytes."""
    return subprocess.run(
        [*prefix, *cli_argv(command, cluster, *args)],
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        env=_env(),
    )


def start_cli(
    command: str,
    cluster: LoopbackCluster | None,
    *args: str,
    stdout: int = subprocess.PIPE,
    stderr: int = subprocess.PIPE,
    prefix: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start the CLI in the background (for signal tests); ``stdout``, ``stderr``: a
    terminal's file descriptor instead of the pipes, say; ``prefix``: what runs it."""
    return subprocess.Popen(
        [*prefix, *cli_argv(command, cluster, *args)],
        cwd=WORKERS,
        stdout=stdout,
        stderr=stderr,
        env=_env(),
    )


def wait_for_lines(
    process: subprocess.Popen[bytes], needle: bytes, count: int, timeout: float
) -> list[bytes]:
    """Read stdout until ``count`` lines contain ``needle``; returns the lines read."""
    assert process.stdout is not None
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    hits = 0
    while hits < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"only {hits}/{count} {needle!r} lines: {seen[-10:]}")
        line = process.stdout.readline()
        if not line:
            raise AssertionError(
                f"stdout ended after {hits}/{count} {needle!r} lines: {seen[-10:]}"
            )
        seen.append(line)
        hits += needle in line
    return seen


def wait_running(cluster: LoopbackCluster, host: str, cmdline: str, timeout: float = 60) -> None:
    """Wait until a process whose command line is ``cmdline`` runs on ``host`` (one of the
    processes carrying the host's marker: a setup's ``sleep``, say)."""
    deadline = time.monotonic() + timeout
    marker = cluster.host(host).marker
    while not any(p.cmdline == cmdline for p in find_processes([marker])):
        assert time.monotonic() < deadline, f"{cmdline!r} never started on {host}"
        time.sleep(0.05)


def rank_lines(stdout: str) -> list[tuple[int, str, int, str]]:
    """Every ``[r<rank> <host>:<local>] text`` line as (rank, host, local, text)."""
    found = []
    for line in stdout.splitlines():
        match = LINE.match(line)
        if match:
            found.append((int(match[1]), match[2], int(match[3]), match[4]))
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NO_COLOR", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def ssh_agent(sock: Path) -> Iterator[Path]:
    """A running ssh-agent of the caller's own at ``sock`` (stopped by its PID)."""
    process = subprocess.Popen(
        ["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        yield sock
    finally:
        process.terminate()
        process.wait(timeout=10)


def assert_every_agent_stopped(kill_table: str, nodes: int) -> None:
    """``kill``'s table: at least one row stopped, and one row per node of the job's
    ``nodes`` (``run``'s and ``exec``'s alike), in order.

    Each host answers for its own agents only, and the first one stopped ends the
    job: its controller may take the others down before their host's ``kill``
    finds them. Which ones is a race, so a node is ``stopped`` or ``not found``.
    """
    rows = [row.split() for row in kill_table.splitlines()[2:]]
    states = [" ".join(row[2:-2] if row[-1] == "s" else row[2:-1]) for row in rows]
    assert "stopped" in states and set(states) <= {"stopped", "not found"}, kill_table
    assert [int(row[1]) for row in rows] == list(range(nodes)), kill_table


def stderr_until(process: subprocess.Popen[bytes], needle: str) -> str:
    """The controller's stderr read line by line up to the first line holding ``needle``."""
    assert process.stderr is not None
    seen = []
    while needle not in (line := process.stderr.readline().decode()):
        assert line, "".join(seen)[-3000:]
        seen.append(line)
    return "".join(seen) + line
