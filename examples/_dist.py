"""Shared start-up and shut-down for the clusterlaunch examples.

Every example calls :func:`setup` first and ends through :func:`finish`, so the
backend choice, the timeouts and the clean exit live in one place:

* ``setup()`` picks ``nccl`` when CUDA is available and ``gloo`` otherwise, so the
  same script runs unmodified on GPU hosts and on a CPU laptop.
* ``finish()`` leaves through ``os._exit`` after a barrier. A plain interpreter exit
  of a gloo worker sometimes aborts with "terminate called without an active
  exception"; torchrun then keeps the healthy peers waiting in its exit barrier
  for 300 s. Exiting right after a barrier, with the group destroyed and the
  streams flushed, avoids both.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist

TIMEOUT_ENV = "CLUSTERLAUNCH_EXAMPLE_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str
    hostname: str

    @property
    def is_main(self) -> bool:
        """True on global rank 0, the rank that logs and writes files."""
        return self.rank == 0


def setup() -> DistInfo:
    """Join the process group that torchrun describes in the environment."""
    _default_single_process_env()
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", local_rank)
        # Before init, so every rank (and its NCCL communicator) uses its own GPU, not GPU 0.
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
        # Several ranks share a host's cores; one intra-op thread each avoids oversubscription.
        torch.set_num_threads(1)
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        timeout=_timeout(),
        # Tells NCCL the rank's GPU up front, so barrier() never has to guess it.
        device_id=device if backend == "nccl" else None,
    )
    return DistInfo(
        rank=dist.get_rank(),
        local_rank=local_rank,
        world_size=dist.get_world_size(),
        local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
        device=device,
        backend=backend,
        hostname=socket.gethostname(),
    )


def say(message: str, *, err: bool = False) -> None:
    """Print ``message`` as one line, in one write, and flush it.

    ``print(message)`` issues two writes (text, then newline) when Python runs
    unbuffered; ranks that share a terminal then interleave mid-line.
    """
    print(message + "\n", end="", file=sys.stderr if err else sys.stdout, flush=True)


def finish(code: int = 0) -> NoReturn:
    """Synchronise every rank, tear the group down and exit with ``code``."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    die(code)


def die(code: int) -> NoReturn:
    """Exit now with ``code``, without waiting for the other ranks.

    For a rank that fails on purpose: its peers learn of it from torchrun (or a
    broken connection), not from a barrier they would wait in until the timeout.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _timeout() -> datetime.timedelta:
    """The rendezvous and collective timeout: short, so a lost peer fails fast."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        seconds = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise SystemExit(f"{TIMEOUT_ENV}={raw!r}: give a number of seconds") from None
    if seconds <= 0:
        raise SystemExit(f"{TIMEOUT_ENV}={raw!r}: give a positive number of seconds")
    return datetime.timedelta(seconds=seconds)


def _default_single_process_env() -> None:
    """Let ``python examples/x.py`` run as a world of one, without torchrun."""
    if "WORLD_SIZE" in os.environ:
        return
    defaults = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    defaults |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
