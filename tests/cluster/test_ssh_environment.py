"""SendEnv and SetEnv as ssh sends them, for both SSH clients, against real sshd.

Debian's and Ubuntu's /etc/ssh/ssh_config say ``SendEnv LANG LC_*`` and their
sshd ``AcceptEnv LANG LC_*``, so plain ssh (and the OpenSSH client, which now
reads that file) gives a job the controller's locale; the paramiko client sent
nothing, and the same job saw another environment by client. Here the config's
lines reach the sessions as ssh sends them: every applying SendEnv line's
patterns (``-PATTERN`` removes earlier ones it matches), the first SetEnv line, SetEnv over SendEnv.
``ssh`` itself, with the same config, is the ground truth.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

CONFIG = (
    "Host node0\n"
    "    SendEnv CL_A* CL_B CL_DROP\n"
    '    SetEnv CL_SET="two words" CL_B=from-setenv\n'
    "    SetEnv CL_IGNORED=second-line\n"
    "Host *\n"
    "    SendEnv CL_? -CL_D*\n"
)
LOCAL = {"CL_A1": "a1", "CL_B": "from-sendenv", "CL_C": "c", "CL_DROP": "d", "CL_NO": "n"}
SHOW = "env | grep ^CL_ | sort"


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_sendenv_and_setenv_reach_the_session_as_ssh_sends_them(
    sim_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, accept_env="CL_*")
    config = tmp_path / "ssh_config"
    config.write_text(CONFIG + cluster.ssh_config.read_text())
    for name, value in LOCAL.items():
        monkeypatch.setenv(name, value)
    ssh = ["ssh", "-F", str(config), "node0", SHOW]
    by_ssh = subprocess.run(ssh, capture_output=True, text=True, timeout=60, env=os.environ)
    assert by_ssh.returncode == 0, by_ssh.stderr
    assert by_ssh.stdout.splitlines() == [  # the ground truth, spelled out
        "CL_A1=a1",
        "CL_B=from-setenv",
        "CL_C=c",
        "CL_SET=two words",
    ]
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    args = ("--ssh-client", client, "--ssh-config", str(config), str(hosts), "--", "sh", "-c")
    result = run_cli("exec", None, *args, SHOW, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [f"[node0] {line}" for line in by_ssh.stdout.splitlines()]
