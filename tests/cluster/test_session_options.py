"""A Host block written for an interactive tunnel, against real sshd: clusterlaunch still
connects as ``ssh -F CONFIG HOST`` does, runs its commands, and leaves nothing running.

``ForkAfterAuthentication yes`` detached the OpenSSH client's master (it ran on, PPID 1,
after a failed command); ``StdinNull yes`` cut every command short; ``SessionType none``
or ``subsystem`` ran no command, and rsync's ssh exited 12 under the paramiko client;
``ControlMaster auto`` with ``ControlPersist yes`` left rsync's own master running. Each
is now overridden (docs/cli.md). Every local process the CLI starts carries the test's
marker in its environment, so whatever it left behind is found by PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster, find_processes, kill_processes
from clusterlaunch.testing.orphans import MARKER_VAR
from tests.cluster.support import cli_argv, write_hosts
from tests.programs import needs_rsync

pytestmark = [pytest.mark.cluster]
CLIENTS = ["paramiko", "openssh"]
TUNNEL = """Host node0
  ForkAfterAuthentication yes
  SessionType none
  LocalForward {port} 127.0.0.1:9
  ExitOnForwardFailure yes
"""
BLOCKS = {
    "tunnel": TUNNEL,
    "stdin-null": "Host *\n  StdinNull yes\n",
    "subsystem": "Host *\n  SessionType subsystem\n",
    "persistent-master": (
        "Host *\n  ControlMaster auto\n  ControlPersist yes\n  ControlPath {tmp}/cm-%C\n"
    ),
}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """For the user's ControlPath: a socket path under pytest's tmp_path is too long."""
    path = Path(tempfile.mkdtemp(prefix="cm", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port the user's own tunnel holds: a master that opened the block's LocalForward
    would fail on it (ExitOnForwardFailure yes)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def _config(cluster: SshVariantCluster, tmp_path: Path, block: str) -> Path:
    """The user's block first, then the cluster's, as a site's config includes it."""
    config = tmp_path / "ssh_config"
    config.write_text(f"{block}\nHost *\nInclude {cluster.ssh_config}\n")
    return config


def _naming(path: Path) -> dict[int, str]:
    """Live processes whose command line names ``path``: a ControlPersist master renames
    itself (``ssh: PATH [mux]``) over its environment, where the marker was."""
    found = {}
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        if str(path) in line and pid != os.getpid():
            found[pid] = line
    return found


def _run(
    cwd: Path, config: Path, hosts: Path, *options: str, masters: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``exec ... -- echo hi`` (the command line reaches the login shell on stdin); and the
    command lines of local processes it left running (killed here, by PID)."""
    marker = f"session-options-{uuid.uuid4().hex}"
    argv = cli_argv(
        "exec", None, "--ssh-config", str(config), *options, str(hosts), "--", "echo", "hi"
    )
    env = {**os.environ, MARKER_VAR: marker, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    left = find_processes([marker])
    kill_processes(left)
    renamed = _naming(masters) if masters is not None else {}
    for pid in renamed:  # by PID, found just now
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return result, [process.cmdline for process in left] + list(renamed.values())


@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("client", CLIENTS)
def test_a_session_setting_neither_breaks_a_command_nor_leaves_ssh_running(
    sim_cluster_factory, tmp_path: Path, taken_port: int, short_dir: Path, client: str, block: str
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster)
    config = _config(cluster, tmp_path, BLOCKS[block].format(port=taken_port, tmp=short_dir))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result, left = _run(tmp_path, config, hosts, "--ssh-client", client, masters=short_dir)
    assert (result.returncode, result.stdout) == (0, "[node0] hi\n"), result.stderr
    assert left == []


@needs_rsync
@pytest.mark.parametrize("block", list(BLOCKS))
@pytest.mark.parametrize("client", CLIENTS)
def test_rsync_over_ssh_follows_the_same_overrides(
    sim_cluster_factory, tmp_path: Path, taken_port: int, short_dir: Path, client: str, block: str
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster)
    config = _config(cluster, tmp_path, BLOCKS[block].format(port=taken_port, tmp=short_dir))
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text("print('v1')\n")
    workdir = tmp_path / "remote-workdir"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(workdir)})])
    result, left = _run(project, config, hosts, "--ssh-client", client, "--sync", masters=short_dir)
    assert result.returncode == 0, result.stderr
    assert "-> " in result.stderr and "rsync" in result.stderr, result.stderr
    assert (workdir / "pkg" / "train.py").read_text() == "print('v1')\n"
    assert left == []


@pytest.mark.parametrize("client", CLIENTS)
def test_a_later_jump_hop_starts_no_master_of_its_own(
    sim_cluster_factory, tmp_path: Path, short_dir: Path, client: str
) -> None:
    """``ProxyJump node0,node1``: the hop to node1 is an ``ssh -W`` of its own, which under
    ``ControlMaster auto`` and ``ControlPersist yes`` would leave a master running."""
    cluster = sim_cluster_factory(3, cls=SshVariantCluster)
    block = "Host node2\n  ProxyJump node0,node1\n" + BLOCKS["persistent-master"]
    config = _config(cluster, tmp_path, block.format(tmp=short_dir))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node2", 1)])
    result, left = _run(tmp_path, config, hosts, "--ssh-client", client, masters=short_dir)
    assert (result.returncode, result.stdout) == (0, "[node2] hi\n"), result.stderr
    assert left == []
