"""A host that accepts the connection and then says nothing (hung, swapped out, a
half-dead proxy): one try, failed at its connect timeout, as ``ssh`` gives up at its
``ConnectTimeout``. Both clients retried it as a dropped handshake: 4 tries and the
backoff, 44 s for a 10 s timeout. ``ssh`` with the same config is the ground truth."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

BANNER = b"SSH-2.0-OpenSSH_9.2p1 silent-after-this\r\n"


class SilentServer:
    """Accepts every connection, keeps it open, and sends at most ``greeting``."""

    def __init__(self, greeting: bytes) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._greeting = greeting
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)
            conn.sendall(self._greeting)

    def close(self) -> None:
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture(params=[b"", BANNER], ids=["no banner", "banner, then no key exchange"])
def silent(request: pytest.FixtureRequest) -> Iterator[SilentServer]:
    server = SilentServer(request.param)
    yield server
    server.close()


def _config(tmp_path: Path, port: int) -> Path:
    (tmp_path / "known_hosts").write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host hung\n    HostName 127.0.0.1\n    Port {port}\n    ConnectTimeout 1\n"
        f"    UserKnownHostsFile {tmp_path}/known_hosts\n    GlobalKnownHostsFile /dev/null\n"
        "    StrictHostKeyChecking yes\n    BatchMode yes\n    IdentitiesOnly yes\n"
    )
    return config


def test_ssh_gives_up_at_its_connect_timeout_once(tmp_path: Path) -> None:
    """The ground truth, where ssh has one: a server that never sends its banner."""
    server = SilentServer(b"")
    try:
        ssh = ["ssh", "-F", str(_config(tmp_path, server.port)), "hung", "true"]
        said = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
        assert said.returncode == 255
        assert "banner exchange" in said.stderr
        assert len(server.accepted) == 1
    finally:
        server.close()


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_host_that_says_nothing_is_tried_once(
    silent: SilentServer, tmp_path: Path, client: str
) -> None:
    config = _config(tmp_path, silent.port)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("hung", 1)])
    args = ("--ssh-client", client, "--ssh-config", str(config), "--verbose", str(hosts))
    result = run_cli("exec", None, *args, "--", "true", timeout=60)
    assert result.returncode == 2, result.stderr
    failed = [line for line in result.stderr.splitlines() if line.startswith("hung ")]
    assert len(failed) == 1, result.stderr
    assert f"127.0.0.1:{silent.port}" in failed[0]
    assert any(f"no SSH {what} with" in failed[0] for what in ("handshake", "session")), failed
    assert "retry" not in result.stderr  # --verbose: each retry is a line there
    assert len(silent.accepted) == 1
