"""A whole ``run`` costs each host one SSH session and one interpreter start of ours.

Counted on the hosts' side, not by clusterlaunch: each simulated sshd logs at
VERBOSE, which records every session it starts ("Starting session: command
for ..."), and the hosts' ``python:`` is a wrapper that appends its arguments
to a file before it execs the real interpreter, so every interpreter a session
starts is on record (ours carry the bootstrap's ``clusterlaunch-NAME``).
Before issue 17 a ``run`` made two of each per host: the preflight probe's,
then the agent's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterlaunch.remote import storewait
from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import PYTHON, rank_lines, run_cli, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

SESSION = re.compile(rb"Starting session: command for ")


class VerboseCluster(LoopbackCluster):
    """Hosts whose sshd logs every session it starts."""

    def _write_files(self) -> None:
        super()._write_files()
        for host in self.hosts:
            config = host.host_dir / "sshd_config"
            config.write_text("LogLevel VERBOSE\n" + config.read_text())


def sessions(cluster: LoopbackCluster) -> dict[str, int]:
    """Sessions each host's sshd has started so far."""
    return {
        host.name: len(SESSION.findall((host.host_dir / "sshd.log").read_bytes()))
        for host in cluster.hosts
    }


def counting_python(tmp_path: Path, before_torchrun: str = "") -> tuple[Path, Path]:
    """A ``python:`` that logs each start (its arguments on one line, a program's newlines
    as spaces), runs ``before_torchrun`` before node 0's torchrun, then is PYTHON.

    Each line is one write: the hosts start at once, and a line written in two parts
    (its text, then its newline) was interleaved with another host's (CI saw it)."""
    log, wrapper = tmp_path / "python-starts.log", tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\nline=$(printf "%s" "$*" | tr "\\n" " ")\nprintf "%s\\n" "$line" >> {log}\n'
        f'[ "$1 $2" = "-m torch.distributed.run" ] && {before_torchrun or ":"}\n'
        f'exec {PYTHON} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, log


def starts(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def our_starts(log: Path) -> list[str]:
    """The logged starts of clusterlaunch's own programs: the bootstrap names each one."""
    return [line for line in starts(log) if ',"clusterlaunch-' in line]


def torchrun_starts(log: Path) -> list[str]:
    """Node 0's torchrun (``-m``) and the others' (``-c``: ``remote/storewait.py``)."""
    return [line for line in starts(log) if line.startswith(("-m torch.distributed.run ", WAITING))]


WAITING = f"-c {storewait.MARK} "


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_run_is_one_session_and_one_interpreter_per_host(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(2, cls=VerboseCluster)
    python, log = counting_python(tmp_path)
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 2, {"python": str(python)}), ("node1", 1, {"python": str(python)})],
    )
    before = sessions(cluster)
    result = run_cli("run", cluster, "--ssh-client", client, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    assert sorted(rank for rank, *_ in rank_lines(result.stdout)) == [0, 1, 2]
    after = sessions(cluster)
    assert {name: after[name] - before[name] for name in after} == {"node0": 1, "node1": 1}
    ours = our_starts(log)
    assert len(ours) == 2, ours
    assert all('"clusterlaunch-agent"' in line for line in ours), ours
    assert sorted(re.search(r"--node-rank (\d+)", line)[1] for line in ours) == ["0", "1"]  # type: ignore[index]
    assert len(torchrun_starts(log)) == 2  # each agent's torchrun, with the go's port
    assert all(" --master-port AUTO " not in line for line in torchrun_starts(log))


def test_a_failed_check_starts_no_job_and_leaves_no_agent(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans
) -> None:
    """node1's workdir is missing: node0's agent checked, got no go, and ended."""
    cluster = sim_cluster_factory(2, cls=VerboseCluster)
    python, log = counting_python(tmp_path)
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1, {"python": str(python)}),
            ("node1", 1, {"python": str(python), "workdir": "/nonexistent/dir"}),
        ],
    )
    result = run_cli("run", cluster, str(hosts), "allreduce.py")
    assert result.returncode == 2, result.stderr
    assert "nothing was started" in result.stderr and "/nonexistent/dir" in result.stderr
    assert torchrun_starts(log) == []
    assert [re.search(r"--node-rank (\d+)", line)[1] for line in our_starts(log)] == ["0"]  # type: ignore[index]
    assert_no_orphans(cluster)


def test_other_nodes_start_torchrun_once_node_0_s_store_listens(
    sim_cluster_factory, tmp_path: Path
) -> None:
    """node0's torchrun starts 3 s late: node1's waits for its store, then joins."""
    cluster = sim_cluster_factory(2)
    python, log = counting_python(tmp_path, before_torchrun="sleep 3")
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1, {"python": str(python)}), ("node1", 2, {"python": str(python)})],
    )
    result = run_cli("run", cluster, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(rank for rank, *_ in lines) == [0, 1, 2]
    assert all("SUM=6" in text for *_, text in lines)  # 1+2+3: every rank joined
    node0, node1 = (
        [line for line in torchrun_starts(log) if f" --node-rank {rank} " in line]
        for rank in (0, 1)
    )
    assert len(node0) == len(node1) == 1, torchrun_starts(log)
    assert node0[0].startswith("-m torch.distributed.run --nnodes 2 ")
    assert node1[0].startswith(WAITING) and " --nnodes 2 --nproc-per-node 2 " in node1[0]
