"""``clusterlaunch sandbox up --slurm``: a newcomer's real Slurm, tried as the printout says.

Root and Slurm's packages, as the ``slurm_real`` tests; the daemons run on this
machine itself, one node named as the machine, on ports of their own: the test
holds Slurm's 6817 as a real Slurm (or a user's own sandbox) would, which made the
sandbox's slurmctld exit ("Address already in use").
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import orphans
from clusterlaunch.testing.slurm import STATE, slurm_unavailable_reason
from tests.cluster.support import PYTHON, REPO, _env, rank_lines

pytestmark = [pytest.mark.slurm_real, pytest.mark.cluster, pytest.mark.torch]


def sandbox(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [PYTHON, "-m", "clusterlaunch", "sandbox", *args, "--dir", str(tmp_path / "sbx")]
    return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)


def test_run_slurm_in_the_sandbox(tmp_path: Path) -> None:
    if reason := slurm_unavailable_reason():
        pytest.skip(f"a real Slurm cannot run here: {reason}")
    with contextlib.ExitStack() as held:
        with contextlib.suppress(OSError):  # already taken: by a real Slurm, as meant
            addr = socket.gethostbyname(socket.gethostname())
            held.enter_context(socket.create_server((addr, 6817)))
        up = sandbox(tmp_path, "up", "--hosts", "1", "--slurm")
        assert up.returncode == 0, up.stderr
    state = tmp_path / "sbx" / "slurm" / STATE
    daemons = [pid for pid, _ in json.loads(state.read_text()).values()]
    try:
        lines = up.stdout.splitlines()
        export = next(line for line in lines if "export SLURM_CONF=" in line)
        salloc = shlex.split(lines[lines.index(export) + 1])
        assert salloc[:5] == ["salloc", "-N1", "-n2", "clusterlaunch", "run"]
        conf = shlex.split(export)[1].split("=", 1)[1]
        job = [*salloc[:3], PYTHON, "-m", "clusterlaunch", "run", "--python", PYTHON, *salloc[5:]]
        ran = subprocess.run(job, cwd=REPO, env={**_env(), "SLURM_CONF": conf},
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert [rank for rank, *_ in sorted(rank_lines(ran.stdout))] == [0, 1]
    finally:
        down = sandbox(tmp_path, "down")
    assert down.returncode == 0, down.stderr
    stopped = f"stopped munged, slurmctld and slurmd (pid {', '.join(map(str, daemons))})"
    assert stopped in down.stdout.splitlines()
    assert not [pid for pid in daemons if orphans.is_alive(pid)]
    assert not (tmp_path / "sbx").exists()
