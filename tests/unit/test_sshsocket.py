"""The paramiko client's TCP socket: no Nagle, quick ACKs, the same errors as before."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest

from clusterlaunch.transport import sshsocket


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


def test_dial_gives_a_connected_socket_without_nagle(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with sshsocket.dial("127.0.0.1", port, timeout=5) as sock:
        assert isinstance(sock, sshsocket.QuickAckSocket)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        assert sock.gettimeout() == 5
        peer, _ = listener.accept()
        with peer:
            peer.sendall(b"SSH-2.0-test\r\n")
            assert sock.recv(64) == b"SSH-2.0-test\r\n"
            sock.sendall(b"back")
            assert peer.recv(64) == b"back"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_QUICKACK is Linux's")
def test_each_read_asks_for_quick_acks_again(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with sshsocket.dial("127.0.0.1", port, timeout=5) as sock:
        peer, _ = listener.accept()
        with peer:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)  # as the kernel may
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0
            peer.sendall(b"x")
            assert sock.recv(1) == b"x"
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 1


def test_a_closed_peer_reads_as_end_of_stream(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    with sshsocket.dial("127.0.0.1", port, timeout=5) as sock:
        peer, _ = listener.accept()
        peer.close()
        assert sock.recv(64) == b""  # paramiko's EOF, not an error from setsockopt


def test_a_refused_port_raises_what_the_message_names(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with pytest.raises(ConnectionRefusedError):
        sshsocket.dial("127.0.0.1", port, timeout=5)


def test_every_address_is_tried_and_the_first_error_is_raised(
    monkeypatch: pytest.MonkeyPatch, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    closed = socket.create_server(("127.0.0.1", 0))
    dead = closed.getsockname()[1]
    closed.close()
    stream = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
    answers = {
        "two": [(*stream, ("127.0.0.1", dead)), (*stream, ("127.0.0.1", port))],
        "none": [(*stream, ("127.0.0.1", dead)), (*stream, ("127.0.0.1", dead))],
    }
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *_: answers[host])
    with sshsocket.dial("two", port, timeout=5) as sock:  # the second address answers
        assert sock.getpeername() == ("127.0.0.1", port)
    with pytest.raises(ConnectionRefusedError):
        sshsocket.dial("none", port, timeout=5)


def test_address_family_limits_the_addresses_dialled(listener: socket.socket) -> None:
    # As ssh -o AddressFamily=inet6 127.0.0.1 (OpenSSH 9.2): "Could not resolve hostname
    # 127.0.0.1: Address family for hostname not supported".
    port = listener.getsockname()[1]
    with pytest.raises(socket.gaierror):
        sshsocket.dial("127.0.0.1", port, 5.0, "inet6")
    for family in ("inet", "any"):
        with sshsocket.dial("127.0.0.1", port, 5.0, family) as sock:
            assert sock.family == socket.AF_INET
