"""The system-wide /etc/ssh/ssh_config, read as ssh reads it: after ``~/.ssh/config`` (the
first value wins), relative Includes under /etc/ssh, not at all under ``--ssh-config``
(``ssh -F``). ``ssh -G`` in the same mount namespace is the ground truth."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import mountns

pytestmark = pytest.mark.skipif(mountns.why_not() is not None, reason=mountns.why_not() or "")

_OURS = """
import json, pwd, os, sys
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig
path = sys.argv[2] or None
[t] = sshconfig.resolve_targets(path, [HostSpec(host=sys.argv[1], gpus=1)])
user = t.user or pwd.getpwuid(os.getuid()).pw_name  # None: ssh's default, the local user
print(json.dumps([t.hostname, t.port, user, t.proxy_jump]))
"""

CASES = {
    "system file only": ({}, {"ssh_config": "Host n0\n  HostName 10.1.1.1\n  Port 2200\n"}),
    "the user's first": (
        {"config": "Host n0\n  Port 2201\n"},
        {"ssh_config": "Host *\n  Port 2202\n  User sys\n  ProxyJump j1\n"},
    ),
    "system's leading lines are global": (
        {"config": "Host other\n  Port 1\n"},
        {"ssh_config": "Port 2203\nUser lead\nHost *\n  HostName 10.3.3.3\n"},
    ),
    "system's relative Include is under /etc/ssh": (
        {"cluster.conf": "Host n0\n  HostName 10.9.9.9\n"},
        {
            "ssh_config": "Include cluster.conf\nInclude ssh_config.d/*.conf\n",
            "cluster.conf": "Host n0\n  HostName 10.2.2.2\n",
            "ssh_config.d/50-site.conf": "Host n*\n  User site\n",
        },
    ),
    "the user's relative Include is under ~/.ssh": (
        {"config": "Include more.conf\n", "more.conf": "Host n0\n  Port 2204\n"},
        {"ssh_config": "Host *\n  Port 2205\n  HostName 10.4.4.4\n"},
    ),
    "Fedora's Match final all": (
        {"config": "Host n0\n  Port 2211\n"},
        {
            "ssh_config": "Include ssh_config.d/*.conf\nHost *\n  User later\n",
            "ssh_config.d/50-redhat.conf": "Match final all\n  Include crypto.conf\n",
            "crypto.conf": "User fin\n  Port 2210\n  HostName 10.6.6.6\n",
        },
    ),
    "no files at all": ({}, {}),
}


def _resolved(prefix: list[str], alias: str, config: str = "") -> tuple[object, object]:
    """(ssh -G's hostname, port, user, proxyjump), (clusterlaunch's), in the namespace."""
    ssh = [*prefix, "ssh", "-G", *(["-F", config] if config else []), alias]
    shown = subprocess.run(ssh, capture_output=True, text=True, timeout=30, check=True).stdout
    options = dict(line.split(" ", 1) for line in shown.splitlines() if " " in line)
    by_ssh = [options["hostname"], int(options["port"]), options["user"]]
    by_ssh.append(None if options.get("proxyjump", "none") == "none" else options["proxyjump"])
    ours = [*prefix, sys.executable, "-c", _OURS, alias, config]
    by_us = subprocess.run(ours, capture_output=True, text=True, timeout=60, check=True).stdout
    return by_ssh, json.loads(by_us)


@pytest.mark.parametrize("case", list(CASES))
def test_default_files_resolve_as_ssh_resolves_them(tmp_path: Path, case: str) -> None:
    user, system = CASES[case]
    prefix = mountns.ssh_dirs(tmp_path, system, user)
    by_ssh, ours = _resolved(prefix, "n0")
    assert ours == by_ssh
    assert _resolved(prefix, "other")[1] == _resolved(prefix, "other")[0]


def test_ssh_config_flag_reads_that_file_alone(tmp_path: Path) -> None:
    own = tmp_path / "own_config"
    own.write_text("Host n0\n  Port 2206\n")
    system = {"ssh_config": "Host *\n  HostName 10.5.5.5\n  User sys\n  ProxyJump j\n"}
    prefix = mountns.ssh_dirs(tmp_path, system, {"config": "Host *\n  User mine\n"})
    by_ssh, ours = _resolved(prefix, "n0", str(own))
    assert ours == by_ssh == ["n0", 2206, by_ssh[2], None]  # neither file read


@pytest.mark.parametrize(
    ("writable", "flag", "refused"),
    [
        ("home/.ssh/config", False, True),  # ~/.ssh/config: checked
        ("home/.ssh/more.conf", False, True),  # an included file: checked
        ("etc_ssh/ssh_config", False, False),  # the system file: not
        ("own_config", True, False),  # an -F file itself: not
        ("home/.ssh/more.conf", True, True),  # a file it includes: checked
    ],
)
def test_a_config_others_may_write_is_refused_where_ssh_refuses_it(
    tmp_path: Path, writable: str, flag: bool, refused: bool
) -> None:
    user = {"config": "Include more.conf\n", "more.conf": "Host n0\n  Port 2207\n"}
    prefix = mountns.ssh_dirs(tmp_path, {"ssh_config": "Host *\n  User sys\n"}, user)
    own = tmp_path / "own_config"
    own.write_text("Include more.conf\n")
    (tmp_path / writable).chmod(0o666)
    config = ["-F", str(own)] if flag else []
    by_ssh = subprocess.run([*prefix, "ssh", "-G", *config, "n0"], capture_output=True, text=True)
    assert (by_ssh.returncode != 0) == refused, by_ssh.stderr  # the ground truth
    assert ("Bad owner or permissions" in by_ssh.stderr) == refused
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - host: n0\n    gpus: 1\n")
    flags = ["--ssh-config", str(own)] if flag else []
    cli = [sys.executable, "-m", "clusterlaunch", "run", "--dry-run", *flags, str(hosts), "x.py"]
    ours = subprocess.run([*prefix, *cli], capture_output=True, text=True, timeout=60)
    if refused:
        assert ours.returncode == 2 and ours.stdout == ""
        path = tmp_path / writable
        assert ours.stderr == (
            f"clusterlaunch: error: {path}: bad owner or permissions: others may write it, "
            f"and ssh refuses it; make it yours and chmod go-w {path}\n"
        )
    else:
        assert ours.returncode == 0, ours.stderr
