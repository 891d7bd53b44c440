"""Slurm for the tests: a fake allocation and a real Slurm cluster.

``fake_slurm``: ``fake_bin/srun`` and ``fake_bin/scontrol`` first on PATH. The
fake srun runs each step right here (see its docstring); every process a step
starts carries ``CLUSTERLAUNCH_SIM_HOST=<marker>-<node>``, so the
simulated-cluster orphan helpers tell whether a test left anything running. Its
tests are in the fast tier, but for the jobs run end to end (cluster tier).

``real_slurm``: munged, slurmctld and three slurmd on three network-namespace
hosts (tests/slurm/real.py), one per test module; root only, and it skips,
naming the packages, when Slurm is not installed.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.testing import kill_processes, wait_until_gone
from clusterlaunch.testing.loopback import SSHD
from tests.cluster.support import PYTHON, WORKERS
from tests.netns import NetnsCluster
from tests.slurm.real import SlurmCluster, slurm_unavailable_reason

FAKE_BIN = Path(__file__).parent / "fake_bin"


@dataclass
class FakeSlurm:
    """One fake allocation: its environment, its log of srun/scontrol calls, its marker."""

    nodes: list[str]
    env: dict[str, str]
    log: Path
    marker: str
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def argv(self, command: str, *args: str) -> list[str]:
        # --python: the hosts' python3 is whatever PATH finds; the test's is known.
        return [PYTHON, "-m", "clusterlaunch", command, "--python", PYTHON, *args]

    def run(
        self, command: str, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """The CLI to completion, from the workers' directory (the steps' workdir)."""
        result = subprocess.run(
            self.argv(command, *args),
            cwd=WORKERS,
            env=self.env,
            capture_output=True,
            timeout=timeout,
        )
        return subprocess.CompletedProcess(
            result.args,
            result.returncode,
            result.stdout.decode("utf-8", "replace"),
            result.stderr.decode("utf-8", "replace"),
        )

    def start(self, command: str, *args: str) -> subprocess.Popen[bytes]:
        """The CLI in the background (signal tests); killed at teardown if still running."""
        process = subprocess.Popen(
            self.argv(command, *args),
            cwd=WORKERS,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.started.append(process)
        return process

    def calls(self) -> list[dict[str, Any]]:
        """Every srun/scontrol call so far, in order."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def steps(self) -> list[dict[str, Any]]:
        """The srun calls only."""
        return [call for call in self.calls() if "argv" in call]

    def markers(self) -> list[str]:
        return [f"{self.marker}-{node}" for node in self.nodes]

    def left_running(self, timeout: float) -> list[str]:
        """Processes the steps started that are still alive after ``timeout`` (then killed)."""
        left = wait_until_gone(self.markers(), timeout=timeout)
        kill_processes(left)
        return [str(proc) for proc in left]


@pytest.fixture
def fake_slurm(tmp_path: Path) -> Iterator[FakeSlurm]:
    """A two-node allocation ``node[1-2]``, two tasks per node."""
    marker = f"fakeslurm-{secrets.token_hex(4)}"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("SLURM_", "SRUN_")) and name != "NO_COLOR"
    }
    env.update(
        PATH=os.pathsep.join([str(FAKE_BIN), str(Path(PYTHON).parent), env.get("PATH", "")]),
        PYTHONUNBUFFERED="1",
        SLURM_JOB_ID="4242",
        SLURM_JOB_NODELIST="node[1-2]",
        SLURM_TASKS_PER_NODE="2(x2)",
        FAKE_SLURM_LOG=str(tmp_path / "slurm-calls.jsonl"),
        FAKE_SLURM_MARKER=marker,
    )
    fake = FakeSlurm(["node1", "node2"], env, tmp_path / "slurm-calls.jsonl", marker)
    yield fake
    for process in fake.started:
        if process.poll() is None:
            process.kill()
            process.wait()
    if left := fake.left_running(timeout=5.0):
        pytest.fail(f"processes left by the fake Slurm steps (killed): {left}", pytrace=False)


@pytest.fixture(scope="module")
def real_slurm(
    tmp_path_factory: pytest.TempPathFactory, _netns_unavailable: str | None
) -> Iterator[SlurmCluster]:
    """A real Slurm on three namespace hosts ``node[0-2]``, each with CPUs = this machine's.

    Stopped at the end of the module; processes left on the nodes then fail it.
    """
    if _netns_unavailable is not None:
        pytest.skip(f"a real Slurm needs network namespaces: {_netns_unavailable}")
    reason = slurm_unavailable_reason() or (None if os.access(SSHD, os.X_OK) else SSHD)
    if reason is not None:
        pytest.skip(f"a real Slurm cannot run here: {reason}")
    base = tmp_path_factory.mktemp("real_slurm")
    started = time.monotonic()
    net = NetnsCluster(3, base / "net").start()
    strays: list[str] = []
    try:
        slurm = SlurmCluster(net, base / "slurm")
        slurm.start()
        slurm.start_seconds = round(time.monotonic() - started, 2)
        try:
            yield slurm
        finally:
            strays = slurm.stop()
    finally:
        killed = net.stop()
    if strays or killed:
        left = strays + [str(proc) for proc in killed]
        pytest.fail(f"processes left on the Slurm nodes (killed): {left}", pytrace=False)
