"""What the controller keeps in the user's cache reaches real sshd hosts only whole."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.core.bootstrap import encode_payload
from clusterlaunch.remote import program_source
from clusterlaunch.remote.payloadcache import StoredPayload
from clusterlaunch.testing import LoopbackCluster
from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The controller's cache folder (``XDG_CACHE_HOME`` in ``tmp_path``), written to."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    return tmp_path / "cache" / "clusterlaunch"


def test_a_damaged_payload_is_built_again_not_sent(
    sim_cluster: LoopbackCluster, tmp_path: Path, cache: Path
) -> None:
    """A flipped byte in the cached agent failed every exec after, for good: "[node0]
    zlib.error: ... incorrect data check", then "python: ... is not a Python"."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    first = run_cli("exec", sim_cluster, str(hosts), "--", "true")
    assert first.returncode == 0, first.stderr
    (agent,) = cache.glob("agent.*.payload")
    damaged = bytearray(agent.read_bytes())
    damaged[2000] ^= 0xFF
    agent.write_bytes(damaged)
    for _ in range(2):  # built again, then read back
        said = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "hi")
        assert (said.returncode, said.stderr) == (0, "")
        assert sorted(said.stdout.splitlines()) == ["[node0] hi", "[node1] hi"]
    assert agent.read_bytes() != damaged


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder in /tmp every user may write in (1777), as the tester's."""
    folder = Path(tempfile.mkdtemp(prefix="clusterlaunch-shared-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def _write_as(user: pwd.struct_passwd, files: dict[Path, bytes]) -> None:
    """Write ``files`` (their folders made as needed) in a forked child that is ``user``."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            for path, content in files.items():
                path.parent.mkdir(exist_ok=True)
                path.write_bytes(content)
            status = 0
        finally:
            os._exit(status)
    assert os.waitpid(pid, 0)[1] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to be another user")
def test_a_program_another_user_put_in_the_cache_runs_on_no_host(
    sim_cluster: LoopbackCluster, tmp_path: Path, shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """XDG_CACHE_HOME on a 1777 folder: the jobctl payload uid 1000 wrote there ran on every
    host of root's ``ps``, as root. Written by a real other user, sealed as ours are."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    ran = shared / "planted-code-ran"
    stored = StoredPayload("jobctl", sys.implementation.cache_tag or "", program_source("jobctl"))
    planted = encode_payload("jobctl", b"open(%r, 'w').close()\n" % str(ran).encode())
    _write_as(pwd.getpwnam("nobody"), {stored.path: planted + stored.seal(planted)})
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    for _ in range(2):
        listed = run_cli("ps", sim_cluster, "--json", str(hosts))
        assert not ran.exists(), "the planted program ran on the hosts"
        assert listed.returncode == 0, listed.stderr
    assert [path.name for path in stored.path.parent.iterdir()] == [stored.path.name]
    assert stored.path.stat().st_uid == pwd.getpwnam("nobody").pw_uid
