"""A DNS server that answers no query until every name it expects was asked.

It shows whether names are looked up at once: asked one after another, the
first query waits for names never asked, the resolver gives up on it
(``timeout_s``), and that name does not resolve. It answers A queries for its
names, nothing for other types (AAAA: no address), NXDOMAIN for other names.
Made the resolver of a mount namespace as :mod:`tests.dns` does; root only
(port 53; ``dns.why_not`` says where it cannot run).
"""

from __future__ import annotations

import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from tests import dns

_A, _IN = 1, 1


class GatheringServer:
    """Holds every query until each of ``names`` has been asked for its A record."""

    def __init__(self, sock: socket.socket, names: Mapping[str, str]) -> None:
        self._sock = sock
        self._names = {name.lower(): addr for name, addr in names.items()}
        self.asked: Counter[str] = Counter()
        """How many times each name's A record was asked for."""
        self._held: list[tuple[bytes, object]] = []
        self.most_held = 0
        """The most A queries held at once: every name's, where they were asked at once."""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                query, peer = self._sock.recvfrom(512)
            except OSError:  # closed: the test is over
                return
            name, qtype = _question(query)
            self._held.append((query, peer))
            if qtype == _A:
                self.asked[name] += 1
                held = sum(_question(kept)[1] == _A for kept, _ in self._held)
                self.most_held = max(self.most_held, held)
            if self.asked.keys() >= self._names.keys():
                for held, to in self._held:
                    self._sock.sendto(_answer(held, self._names), to)
                self._held.clear()

    def close(self) -> None:
        self._sock.close()
        self._thread.join(timeout=5)


@contextmanager
def gathering_resolver(
    tmp_path: Path, names: Mapping[str, str], timeout_s: int
) -> Iterator[tuple[list[str], GatheringServer]]:
    """The argv prefix of a namespace whose resolver is a :class:`GatheringServer`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for addr in dns.server_addresses():
        try:
            sock.bind((addr, 53))
            break
        except OSError:
            continue
    else:
        sock.close()
        raise RuntimeError("no address to serve DNS on")
    server = GatheringServer(sock, names)
    try:
        yield dns.namespace_prefix(tmp_path, addr, timeout_s), server
    finally:
        server.close()


def _question(query: bytes) -> tuple[str, int]:
    """The first question's name (lowercase, no trailing dot) and type."""
    labels, at = [], 12
    while query[at]:
        labels.append(query[at + 1 : at + 1 + query[at]].decode("ascii", "replace"))
        at += 1 + query[at]
    (qtype,) = struct.unpack("!H", query[at + 1 : at + 3])
    return ".".join(labels).lower(), qtype


def _answer(query: bytes, names: Mapping[str, str]) -> bytes:
    """The reply: the A record of a known name, no record for its other types, else
    NXDOMAIN; the question copied back."""
    name, qtype = _question(query)
    end = 12 + sum(len(label) + 1 for label in name.split(".")) + 1 + 4
    known = name in names
    records = b""
    if known and qtype == _A:
        address = socket.inet_aton(names[name])
        records = struct.pack("!HHHIH", 0xC00C, _A, _IN, 60, 4) + address
    flags = 0x8180 | (0 if known else 3)  # a response, recursion asked and available
    header = query[:2] + struct.pack("!HHHHH", flags, 1, 1 if records else 0, 0, 0)
    return header + query[12:end] + records
