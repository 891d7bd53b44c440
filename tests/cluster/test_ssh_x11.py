"""X11 is not forwarded to a job's sessions, by either client, whatever the SSH config.

With ``ForwardX11 yes`` (set for desktop work, often under ``Host *``) ssh asks every
session for X11 forwarding and sshd sets ``DISPLAY``: every rank of a job would then
draw on the laptop the launch came from, through one SSH connection per host. pdsh
passes ``-x`` for the same reason. The paramiko client never asked; the OpenSSH
client asked where the config said so: the two clients' jobs differed. Now neither
does (``-x``), and the hosts-file reference says so. ``ssh`` is the ground truth
that the config does forward.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(shutil.which("xauth") is None, reason="sshd's X11 needs xauth"),
]


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_jobs_sessions_get_no_display(
    sim_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, x11=True)
    config = tmp_path / "ssh_config"
    config.write_text(cluster.ssh_config.read_text() + "Host *\n    ForwardX11 yes\n")
    monkeypatch.setenv("DISPLAY", ":97")  # ssh asks for X11 only where DISPLAY is set
    monkeypatch.setenv("XAUTHORITY", str(tmp_path / "Xauthority"))
    show = "echo display=${DISPLAY:-none}"
    argv = ["ssh", "-F", str(config), "node0", show]
    by_ssh = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ)
    assert by_ssh.stdout.startswith("display=localhost:"), by_ssh.stderr  # ssh forwards
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), "--", "sh", "-c")
    result = run_cli("exec", None, *args, show, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "[node0] display=none\n"
