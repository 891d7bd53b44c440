"""IPv6 addresses with a port in what clusterlaunch prints, for both clients (``::1``).

``fd42:6::10:2222`` is itself a valid IPv6 address, so an address and a port written
so cannot be told apart; ssh writes ``host fd42:6::10 port 2222``, clusterlaunch
``[fd42:6::10]:2222`` (core/hostport.py), for a refused connection as everywhere.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.cluster.support import exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_refused_ipv6_address_is_bracketed_with_its_port(tmp_path: Path, client: str) -> None:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6) as unused:
            port = unused.getsockname()[1]  # closed again: nothing listens there
    except OSError:
        pytest.skip("no IPv6 loopback here")
    hosts = write_hosts(tmp_path / "hosts.yaml", [('"::1"', 1, {"port": port})])
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    BatchMode yes\n    StrictHostKeyChecking yes\n")
    result = exec_echo_hi(client, hosts, config=config)
    assert result.returncode != 0
    assert f"connection refused by [::1]:{port} (is sshd listening on that port?)" in (
        result.stderr
    ), result.stderr[-2000:]
