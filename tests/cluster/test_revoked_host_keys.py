"""A revoked host key (``@revoked`` in known_hosts, the host's key or its CA's) is refused
by ``--ssh-client openssh`` as ssh refuses it, and said to be revoked: it was called an
"unknown host key", with the advice to add it to known_hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.testing import SshVariantCluster, find_processes
from tests.cluster.support import recorded_key, run_cli, write_hosts

pytestmark = [pytest.mark.cluster]


def _exec_touch(cluster, tmp_path: Path, *options: str):  # type: ignore[no-untyped-def]
    hosts = write_hosts(tmp_path / "hosts.yaml", [(name, 1) for name in cluster.names])
    marker = tmp_path / "started"
    command = ("--", "sh", "-c", f"echo $CLUSTERLAUNCH_SIM_HOST >> {marker}")
    result = run_cli("exec", cluster, "--ssh-client", "openssh", *options, str(hosts), *command)
    return result, marker


def _problem_of(stderr: str, host: str) -> str:
    assert stderr.startswith("clusterlaunch: preflight failed on 1 host(s); nothing was started")
    [row] = [line for line in stderr.splitlines() if line.startswith(f"{host}  ")]
    return row


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_revoked_host_key_is_said_to_be_revoked_naming_its_line(
    sim_cluster_factory, tmp_path: Path, policy: str
) -> None:
    cluster = sim_cluster_factory(2)
    with cluster.known_hosts.open("a") as known:
        known.write(f"@revoked * {recorded_key(cluster, 'node1')}\n")
    result, marker = _exec_touch(cluster, tmp_path, "--host-key-policy", policy)
    assert result.returncode == 2, result.stderr
    row = _problem_of(result.stderr, "node1")
    assert row.endswith(
        f"connect  HOST KEY REVOKED: its ED25519 key is marked @revoked in "
        f"{cluster.known_hosts}:3; refusing to connect, as ssh does, and nothing was started "
        "there. A revoked key may be a stolen one: ask the host's administrator"
    ), result.stderr
    assert not marker.exists()  # node0 was fine, but nothing starts anywhere
    assert not find_processes(cluster.markers())


def test_a_revoked_certificate_authority_is_said_to_be_revoked(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(1, cls=SshVariantCluster, host_ca=True)
    ca = " ".join(cluster.host_ca_key.with_suffix(".pub").read_text().split()[:2])
    with cluster.known_hosts.open("a") as known:
        known.write(f"# revoked: the CA's key was stolen\n@revoked * {ca}\n")
    result, marker = _exec_touch(cluster, tmp_path)
    assert result.returncode == 2, result.stderr
    row = _problem_of(result.stderr, "node0")
    revoked = (
        f"HOST KEY REVOKED: its ED25519-CERT key is marked @revoked in {cluster.known_hosts}:3;"
    )
    assert revoked in row, result.stderr
    assert "unknown host key" not in result.stderr
    assert not marker.exists()
