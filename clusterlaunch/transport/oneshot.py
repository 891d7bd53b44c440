"""Short commands on many hosts at once, each read to its end: one round trip for all."""

from __future__ import annotations

import select
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from clusterlaunch.errors import TransportError
from clusterlaunch.transport.base import Connection, RemoteProcess

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Finished:
    """How one command ended. ``status`` is None when it could not start or timed out."""

    status: int | None
    out: bytes = b""
    err: bytes = b""
    error: str | None = None
    """Why there is no status."""


def run_all(jobs: Mapping[K, tuple[Connection, str]], timeout: float) -> dict[K, Finished]:
    """Start every ``(connection, command)``, with stdin closed, and wait for all of them."""
    results: dict[K, Finished] = {}
    running: dict[K, RemoteProcess] = {}
    outputs: dict[K, tuple[list[bytes], list[bytes]]] = {}
    for key, (connection, command) in jobs.items():
        try:
            process = connection.start(command)
        except TransportError as exc:
            results[key] = Finished(None, error=exc.detail)
            continue
        process.close_stdin()
        running[key] = process
        outputs[key] = ([], [])
    deadline = time.monotonic() + timeout
    try:
        while running:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            fds = [fd for process in running.values() for fd in process.waitables()]
            if fds:
                select.select(fds, [], [], min(left, 0.2))
            else:
                time.sleep(0.005)
            for key, process in list(running.items()):
                out, err = process.read()
                outputs[key][0].append(out)
                outputs[key][1].append(err)
                if process.finished():
                    results[key] = Finished(
                        process.exit_status(), b"".join(outputs[key][0]), b"".join(outputs[key][1])
                    )
                    del running[key]
                    process.close()
        for key in running:
            out, err = (b"".join(part) for part in outputs[key])
            results[key] = Finished(None, out, err, error=f"no answer within {timeout:g} s")
    finally:
        for process in running.values():
            process.close()
    return {key: results[key] for key in jobs}
