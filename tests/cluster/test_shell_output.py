"""What the host's shell prints before the command (a ``BASH_ENV`` file, here) is not the
command's output: ``exec`` keeps it out of node-N.log, and it ends its own line before
the command's first one. It went into node-N.log, joined to that line
(``no newline at end of rchi``), with both clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import run_cli, run_cli_bytes, write_hosts

pytestmark = [pytest.mark.cluster]


def _chatty_shell(sim_cluster_factory, tmp_path: Path, last: str) -> SshVariantCluster:  # type: ignore[no-untyped-def]
    """One host whose every bash session reads a file that prints (once: bash -c nests)."""
    rc = tmp_path / "rc.sh"
    rc.write_text(
        '[ -n "$CL_RC_DONE" ] && return 0; export CL_RC_DONE=1\n'
        "printf 'RCJUNK line\\n'\n"
        "printf 'rc-stderr\\n' >&2\n"
        f"printf '{last}'\n"
    )
    # login_rc=False: a ~/.bashrc here runs bash scripts (pyenv's), which read it too
    cluster: SshVariantCluster = sim_cluster_factory(
        1, cls=SshVariantCluster, session_env=f"BASH_ENV={rc}", login_rc=False
    )
    return cluster


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
@pytest.mark.parametrize("last", ["no newline at end of rc", "last rc line\\n"])
def test_execs_node_log_holds_the_command_alone_the_shells_lines_their_own(
    sim_cluster_factory, tmp_path: Path, client: str, last: str
) -> None:
    cluster = _chatty_shell(sim_cluster_factory, tmp_path, last)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    logs = tmp_path / "logs"
    args = ("--ssh-client", client, "--log-dir", str(logs), str(hosts), "--", "echo", "hi")
    result = run_cli_bytes("exec", cluster, *args)
    assert result.returncode == 0, result.stderr
    assert (logs / "node-0.log").read_bytes() == b"hi\n"
    shown = last.replace("\\n", "")
    assert result.stdout == f"[node0] RCJUNK line\n[node0] {shown}\n[node0] hi\n".encode()
    assert b"[node0] rc-stderr\n" in result.stderr
    logged = (logs / "controller.log").read_text().splitlines()  # stderr's lines come between
    shell = [logged.index("[node0] RCJUNK line"), logged.index(f"[node0] {shown}")]
    assert shell == sorted(shell) and shell[1] < logged.index("[node0] hi"), logged


@pytest.mark.torch
def test_runs_shell_lines_are_their_own_before_the_jobs(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = _chatty_shell(sim_cluster_factory, tmp_path, "no newline at end of rc")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = run_cli("run", cluster, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    shell = "[node0]      RCJUNK line\n[node0]      no newline at end of rc\n"
    assert result.stdout.startswith(shell + "[r0 node0:0] RANK=0 "), result.stdout  # in order
