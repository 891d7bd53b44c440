"""A controller whose uid has no name (a container's bare ``docker --user``, no ``USER``
or ``LOGNAME``) and a host with no user to log in as: one line in ssh's words, exit 2,
for both clients, against real sshd. paramiko's getpass raised KeyError, a traceback;
the OpenSSH client's ssh said ``No user exists for uid N`` once per host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import mountns
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


def _config_without_users(sim_cluster, tmp_path: Path) -> Path:
    lines = sim_cluster.ssh_config.read_text().splitlines(keepends=True)
    config = tmp_path / "ssh_config"
    config.write_text("".join(line for line in lines if not line.strip().startswith("User ")))
    return config


@pytest.mark.parametrize("command", ["check", "exec"])
@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_no_user_to_log_in_as_is_one_line_exit_2(sim_cluster, tmp_path, client, command):
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    config = _config_without_users(sim_cluster, tmp_path)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    words = ["--ssh-config", str(config), "--ssh-client", client, str(hosts)]
    words += ["true"] if command == "exec" else []
    result = run_cli(command, None, *words, prefix=mountns.without_a_user(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"clusterlaunch: error: No user exists for uid {os.getuid()} (no entry in the "
        "password database, and USER and LOGNAME are unset); add one (a container started "
        "with --user needs a line in /etc/passwd), or name the user to log in as: user: in "
        "the hosts file or User in the SSH config"
    ]


def test_a_user_in_the_hosts_file_is_enough_for_the_paramiko_client(sim_cluster, tmp_path):
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    config = _config_without_users(sim_cluster, tmp_path)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"user": sim_cluster.user})])
    words = ["--ssh-config", str(config), str(hosts), "--", "echo", "hi"]
    result = run_cli("exec", None, *words, prefix=mountns.without_a_user(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[node0] hi\n"
