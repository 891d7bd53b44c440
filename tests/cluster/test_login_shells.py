"""Hosts whose login shell is tcsh or fish, as at some HPC sites: every command still runs.

sshd hands each command to the user's login shell; clusterlaunch's commands are
POSIX sh, which tcsh ("Illegal variable name.") and fish ("command substitutions
not allowed here") refused before :func:`clusterlaunch.core.commands.for_login_shell`.
Each sshd here runs in a mount namespace of its own whose /etc/passwd gives this
user that shell (tests/mountns.py does the same for ssh's files): the machine's
files are never touched. Real sshd, real torchrun, both SSH clients.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster, SimHost, find_processes
from tests import mountns
from tests.cluster.support import rank_lines, run_cli, start_cli, write_hosts

pytestmark = [pytest.mark.cluster]
SHELLS = ["tcsh", "fish"]


class LoginShellCluster(LoopbackCluster):
    """A loopback cluster whose sshd servers see ``shell`` as this user's login shell."""

    def __init__(self, *args: object, shell: str, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.shell = shell

    def _launch_prefix(self, host: SimHost) -> list[str]:
        passwd = self.base_dir / "passwd"
        if not passwd.exists():
            lines = Path("/etc/passwd").read_text().splitlines(keepends=True)
            passwd.write_text("".join(self._with_shell(line) for line in lines))
        script = 'mount --bind "$1" /etc/passwd && shift && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(passwd),
        ]

    def _with_shell(self, line: str) -> str:
        fields = line.rstrip("\n").split(":")
        if len(fields) == 7 and fields[0] == self.user:
            fields[6] = self.shell
            return ":".join(fields) + "\n"
        return line


def _cluster(sim_cluster_factory, shell: str) -> LoginShellCluster:
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} not installed (scripts/test-programs.sh installs it)")
    cluster = sim_cluster_factory(2, cls=LoginShellCluster, shell=path)
    # The premise: sshd gives the command to that shell (only it sets $version).
    said = subprocess.run(
        [*cluster.ssh_argv("node0"), "echo $version"], capture_output=True, text=True, timeout=30
    )
    assert said.stdout.strip() and said.returncode == 0, said.stderr
    return cluster


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_exec_runs_and_keeps_the_exit_status(
    sim_cluster_factory, tmp_path: Path, shell: str, client: str
) -> None:
    cluster = _cluster(sim_cluster_factory, shell)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    command = "echo \"it's $CLUSTERLAUNCH_SIM_HOST\"; printf 'a\\\\b!\\n'; exit 7"
    result = run_cli("exec", cluster, "--ssh-client", client, str(hosts), "--", "sh", "-c", command)
    assert result.returncode == 7, result.stderr
    for marker, name in zip(cluster.markers(), cluster.names, strict=True):
        assert f"[{name}] it's {marker}\n" in result.stdout
        assert f"[{name}] a\\b!\n" in result.stdout


@pytest.mark.torch
@pytest.mark.parametrize("shell", SHELLS)
def test_a_job_with_setup_runs_on_every_rank(
    sim_cluster_factory, tmp_path: Path, shell: str
) -> None:
    cluster = _cluster(sim_cluster_factory, shell)
    # setup: is POSIX sh there too (/bin/sh runs it): export, not setenv.
    setup = {"setup": "export FROM_ENV_FILE='hello, world'"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2, setup), ("node1", 1, setup)])
    result = run_cli("run", cluster, str(hosts), "show_env.py")
    assert result.returncode == 0, result.stderr
    seen = {rank: json.loads(text[4:]) for rank, _, _, text in rank_lines(result.stdout)}
    assert sorted(seen) == [0, 1, 2]
    assert all(env["FROM_ENV_FILE"] == "hello, world" for env in seen.values()), result.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_a_stuck_setup_is_ended_on_sigterm(sim_cluster_factory, tmp_path: Path, shell: str) -> None:
    """The setup's shell is killed by PID once its start time matches (setupguard)."""
    cluster = _cluster(sim_cluster_factory, shell)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": "sleep 600"})])
    process = start_cli("exec", cluster, str(hosts), "--", "true")
    deadline = time.monotonic() + 30
    while not _sleeps(cluster) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeps(cluster), "the setup never started"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 128 + signal.SIGTERM, err
    deadline = time.monotonic() + 5
    while _sleeps(cluster) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sleeps(cluster) == []


def _sleeps(cluster: LoopbackCluster) -> list[object]:
    return [p for p in find_processes(cluster.markers()) if p.cmdline == "sleep 600"]
