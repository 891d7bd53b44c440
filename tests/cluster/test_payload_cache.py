"""What the controller keeps in the user's cache reaches real sshd hosts only whole."""

from __future__ import annotations

from pathlib import Path

import pytest

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
