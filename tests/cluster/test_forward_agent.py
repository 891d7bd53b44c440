"""ForwardAgent as ssh follows it, for both SSH clients, against real sshd: with
``ForwardAgent yes`` a job's session reaches the agent on the controller's side (a
``git`` or ``ssh`` inside the job can use its keys); the paramiko client forwarded
nothing. ``ssh`` with the same config is the ground truth."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

LIST = "ssh-add -l; echo status=$?"


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
@pytest.mark.parametrize("forward", ["yes", "no"])
def test_the_agent_reaches_the_job_as_ssh_forwards_it(
    sim_cluster_factory, tmp_path: Path, ssh_agent_sock: Path, forward: str, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    subprocess.run(["ssh-add", "-q", str(cluster.client_key)], check=True, capture_output=True)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n    ForwardAgent {forward}\n" + cluster.ssh_config.read_text())
    ssh = ["ssh", "-F", str(config), "node0", LIST]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60, env=os.environ)
    said = by_ssh.stdout.splitlines()
    assert said[-1] == ("status=0" if forward == "yes" else "status=2"), by_ssh  # ground truth
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), "--", "sh", "-c")
    result = run_cli("exec", None, *args, LIST, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"[node0] {line}" for line in said]
