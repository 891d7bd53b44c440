"""The disk under torchrun's per-rank files, on hosts whose /tmp is a small tmpfs.

Every byte a rank writes goes through a file in ``/tmp/clusterlaunch-UID`` on its host.
Kept whole, they grew for the whole job; a host whose /tmp filled during the run lost its
ranks' output and their ``No space left on device`` tracebacks, and the summary said a
bare "rank 1 on fi exited with code 1"; ``check`` and ``doctor`` saw nothing wrong with a
/tmp of 96 KiB free. Here node1's sshd (and every session it starts) has a tmpfs as /tmp
(``tests/mountns.small_tmp``): 256 KiB, or 80 MiB that a rank fills.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from clusterlaunch.core import defaults
from clusterlaunch.testing import LoopbackCluster, SimHost
from tests import mountns
from tests.cluster.support import REPO, run_cli, write_hosts

pytestmark = [pytest.mark.cluster]
FOLDER = f"/tmp/clusterlaunch-{os.getuid()}"


class SmallTmpCluster(LoopbackCluster):
    """node1's /tmp is a tmpfs of :attr:`TMP_SIZE`; the other hosts see the machine's."""

    TMP_SIZE = "256k"

    def _launch_prefix(self, host: SimHost) -> list[str]:
        if host.name != "node1":
            return super()._launch_prefix(host)
        keep = [self.base_dir, REPO, Path(sys.prefix), Path(sys.base_prefix)]
        return mountns.small_tmp(self.base_dir / "small-tmp", self.TMP_SIZE, keep)


class FillableTmpCluster(SmallTmpCluster):
    """Room enough to pass the preflight (``defaults.RANK_FILES_MIN_FREE``), for a rank to
    fill."""

    TMP_SIZE = "80m"


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    return write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])


@pytest.mark.parametrize("command", ["check", "run"])
def test_the_preflight_refuses_a_nearly_full_tmp(
    sim_cluster_factory, hosts: Path, command: str
) -> None:
    """A small file still fits (the old check passed), but not a job's output."""
    cluster = sim_cluster_factory(2, cls=SmallTmpCluster)
    result = run_cli(command, cluster, str(hosts), "sleeper.py", timeout=90)
    assert result.returncode == 2, result.stdout + result.stderr
    [row] = [line for line in (result.stdout + result.stderr).splitlines() if " node1 " in line]
    need = defaults.RANK_FILES_MIN_FREE >> 20
    assert f"KiB free in {FOLDER}, where torchrun's per-rank files go" in row, row
    assert f"{need} MiB wanted): free space in /tmp on that host" in row, row
    assert "[r0 " not in result.stdout  # nothing started


def test_doctor_warns_of_a_nearly_full_tmp(sim_cluster_factory, hosts: Path) -> None:
    cluster = sim_cluster_factory(2, cls=SmallTmpCluster)
    result = run_cli("doctor", cluster, str(hosts), timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr  # a warning, not an error
    [line] = [line for line in result.stdout.splitlines() if line.startswith("warning: node1")]
    assert f"KiB free in {FOLDER}, where torchrun's per-rank files go" in line, line
    assert line.endswith("free space in /tmp on node1 (the folder is always in /tmp; TMPDIR "
                         "does not move it)"), line  # fmt: skip
    assert not [line for line in result.stdout.splitlines() if line.startswith("warning: node0")]
    assert re.search(rf"^  rank files +\d+ KiB free in {FOLDER}$", result.stdout, re.M)


def test_a_tmp_that_fills_during_the_job_is_named_as_the_cause(
    sim_cluster_factory, hosts: Path, tmp_path: Path
) -> None:
    """The failing rank's output and traceback are lost to the full disk: what is left to
    tell is that it was full, on the console, in controller.log and in the summary."""
    cluster = sim_cluster_factory(2, cls=FillableTmpCluster)
    logs = tmp_path / "logs"
    args = ("--log-dir", str(logs), str(hosts), "fill_tmp.py")
    result = run_cli("run", cluster, *args, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    said = f"clusterlaunch: node1: {FOLDER} is full ("
    [line] = [line for line in result.stderr.splitlines() if line.startswith(said)]
    assert "what its ranks write from now on is lost, their errors too (no space left on " \
        "device); free space in /tmp on node1" in line, line  # fmt: skip
    summary = f"clusterlaunch: job failed: rank 1 on node1 exited with code 1; likely cause: " \
        f"{FOLDER} on node1 was full (no space left on device)"  # fmt: skip
    assert summary in result.stderr, result.stderr
    log = (logs / "controller.log").read_text()
    assert said[len("clusterlaunch: ") :] in log and summary[len("clusterlaunch: ") :] in log
    assert "DONE" not in result.stdout  # its writes really failed


def test_a_chatty_rank_keeps_little_on_disk(sim_cluster_factory, tmp_path: Path) -> None:
    """32 MiB through a rank's stdout: once the agent has sent it, the rank folder holds
    (almost) none of it; before, all of it, for the whole job."""
    cluster = sim_cluster_factory(1)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    logs = tmp_path / "logs"
    result = run_cli("run", cluster, "--log-dir", str(logs), str(hosts), "chatty.py", "32")
    assert result.returncode == 0, result.stderr[-2000:]
    written = b"y" * 1023 + b"\n"
    assert (logs / "rank-0.log").read_bytes()[: 32 << 20] == written * 32768  # all of it came
    [line] = [line for line in result.stderr.splitlines() if "rank folder holds" in line]
    assert int(line.split()[-2]) <= 1 << 20, line
