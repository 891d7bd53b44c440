"""Exercise the basic collectives and check every result against arithmetic.

Each rank runs, in order: a ring send/recv (rank r sends r to r+1), a broadcast
from rank 0, a sum-reduce to rank 0, a sum all-reduce and an all-gather. Every
check prints ``OK`` or ``FAIL`` with what it got; a rank with a failed check exits 1.
Works for any world size (send/recv needs two ranks or more) and any number of
processes per host, because every expectation depends on the global rank only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist
from _dist import DistInfo, finish, say, setup

# Integer tensors: every expected value is exact, so checks compare with ==.
DTYPE = torch.int64


def values(info: DistInfo, *numbers: int) -> torch.Tensor:
    """A 1-D integer tensor on this rank's device (GPU tensors for NCCL)."""
    return torch.tensor(numbers, dtype=DTYPE, device=info.device)


def check(info: DistInfo, name: str, got: torch.Tensor, expected: torch.Tensor) -> bool:
    """Print one OK/FAIL line for ``name`` and return whether it passed."""
    passed = torch.equal(got.cpu(), expected.cpu())
    status = "OK  " if passed else "FAIL"
    detail = f"got {got.tolist()}" + ("" if passed else f", expected {expected.tolist()}")
    say(f"{status} {name:<10} rank {info.rank}/{info.world_size}: {detail}", err=not passed)
    return passed


def ring_send_recv(info: DistInfo) -> bool:
    """Rank r sends r to r+1 and receives r-1 from r-1 (modulo the world size)."""
    outgoing, incoming = values(info, info.rank), values(info, -1)
    ops = [
        dist.P2POp(dist.isend, outgoing, (info.rank + 1) % info.world_size),
        dist.P2POp(dist.irecv, incoming, (info.rank - 1) % info.world_size),
    ]
    # Posted as one batch: a blocking send first on every rank could deadlock the
    # ring, and NCCL needs the pair grouped when both ops involve the same peer.
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return check(info, "send/recv", incoming, values(info, (info.rank - 1) % info.world_size))


def broadcast(info: DistInfo) -> bool:
    """Rank 0's tensor replaces everyone else's."""
    tensor = values(info, 7, 11, 13) if info.is_main else values(info, 0, 0, 0)
    dist.broadcast(tensor, src=0)
    return check(info, "broadcast", tensor, values(info, 7, 11, 13))


def reduce(info: DistInfo) -> bool:
    """Rank r contributes r + 1; rank 0 receives 1 + 2 + ... + world_size."""
    tensor = values(info, info.rank + 1)
    dist.reduce(tensor, dst=0, op=dist.ReduceOp.SUM)
    if not info.is_main:
        return True  # only the destination's buffer is defined after reduce()
    world = info.world_size
    return check(info, "reduce", tensor, values(info, world * (world + 1) // 2))


def all_reduce(info: DistInfo) -> bool:
    """Every rank ends with the sum of the ranks and a count of the ranks."""
    tensor = values(info, info.rank, 1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    world = info.world_size
    return check(info, "all_reduce", tensor, values(info, world * (world - 1) // 2, world))


def all_gather(info: DistInfo) -> bool:
    """Every rank ends with [r, r*r] from each rank r, in rank order."""
    mine = values(info, info.rank, info.rank * info.rank)
    gathered = [torch.empty_like(mine) for _ in range(info.world_size)]
    dist.all_gather(gathered, mine)
    expected = [values(info, r, r * r) for r in range(info.world_size)]
    return check(info, "all_gather", torch.stack(gathered), torch.stack(expected))


def checks_for(info: DistInfo) -> list[Callable[[DistInfo], bool]]:
    """The checks that make sense for this world size."""
    point_to_point = [ring_send_recv] if info.world_size > 1 else []
    return [*point_to_point, broadcast, reduce, all_reduce, all_gather]


def summarise(info: DistInfo, failures: int) -> None:
    """Rank 0 reports how many checks failed across the whole job."""
    total = values(info, failures)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    if info.is_main:
        failed = int(total.item())
        verdict = "all checks passed" if failed == 0 else f"{failed} check(s) FAILED"
        say(f"collectives: {verdict} across {info.world_size} rank(s), backend {info.backend}")


def main() -> None:
    """Run every check on every rank; exit 1 on a rank where one failed."""
    info = setup()
    failures = sum(not run(info) for run in checks_for(info))
    summarise(info, failures)
    finish(1 if failures else 0)


if __name__ == "__main__":
    main()
