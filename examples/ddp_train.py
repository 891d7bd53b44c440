"""Train a small MLP with DistributedDataParallel on a synthetic regression task.

What it shows: a seeded dataset that every rank builds identically, a
DistributedSampler that gives each rank its own shard, DDP averaging the
gradients, rank 0 logging the loss averaged over all ranks and saving a
checkpoint after every epoch. A job started again (by hand, or by clusterlaunch
``--max-restarts`` after a lost host) resumes from that checkpoint: the epoch
counter goes on, and the sampler shards the data for the new world size.
Put the checkpoint on a filesystem every host sees: after a restart rank 0 may
run on another host. ``--fail-at-epoch N --fail-rank R`` makes rank R exit with
code 3 at the start of epoch N, to see how clusterlaunch reports a failed rank;
``--pace S`` sleeps S seconds after each epoch (time to pull a host's plug).

    torchrun --nproc-per-node 2 examples/ddp_train.py --epochs 3
    clusterlaunch run --max-restarts 3 hosts.yaml examples/ddp_train.py \
        --epochs 50 --checkpoint /shared/ckpt/mlp.pt
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from _dist import DistInfo, die, finish, say, setup
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES = 8
HIDDEN = 32
FAIL_EXIT_CODE = 3


def parse_args() -> argparse.Namespace:
    """Command-line options; every rank parses the same arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=_positive, default=3)
    parser.add_argument("--batch-size", type=_positive, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--samples", type=_positive, default=4096, help="dataset size")
    parser.add_argument("--seed", type=int, default=0, help="data and initial weights")
    parser.add_argument("--checkpoint", default="checkpoint.pt", help="written by rank 0")
    parser.add_argument("--fail-at-epoch", type=_positive, help="fail on purpose at this epoch")
    parser.add_argument("--fail-rank", type=int, default=0, help="the rank that fails")
    parser.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds to sleep per epoch")
    return parser.parse_args()


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return value


def make_dataset(samples: int, seed: int) -> TensorDataset:
    """A noisy nonlinear target; the fixed seed makes every rank build the same data."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(samples, FEATURES, generator=generator)
    direction = torch.randn(FEATURES, 1, generator=generator) / FEATURES**0.5
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.sin(inputs @ direction) + 0.5 * (inputs @ weights)
    targets += 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(inputs, targets)


def make_model(info: DistInfo, seed: int) -> DistributedDataParallel:
    """The MLP wrapped in DDP (which also copies rank 0's initial weights to everyone)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    model.to(info.device)
    device_ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def train_epoch(
    model: nn.Module, loader: DataLoader, optimizer: torch.optim.Optimizer, info: DistInfo
) -> float:
    """One pass over this rank's shard; returns the mean loss over all ranks."""
    loss_fn = nn.MSELoss()
    # Summed on the device, read once at the end: no host sync per step on GPUs.
    totals = torch.zeros(2, dtype=torch.float64, device=info.device)
    for inputs, targets in loader:
        inputs = inputs.to(info.device, non_blocking=True)
        targets = targets.to(info.device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        totals[0] += loss.detach() * len(inputs)
        totals[1] += len(inputs)
    dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return float(totals[0] / totals[1])


def maybe_fail(args: argparse.Namespace, info: DistInfo, epoch: int) -> None:
    """Exit with code 3 on ``--fail-rank`` at ``--fail-at-epoch``, as a crash would."""
    if args.fail_at_epoch == epoch and info.rank == args.fail_rank:
        say(f"rank {info.rank}: failing on purpose at epoch {epoch} (--fail-at-epoch)", err=True)
        # No barrier: the other ranks are busy training and would never reach it.
        die(FAIL_EXIT_CODE)


def save_checkpoint(
    path: str,
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    epoch: int,
    loss: float,
) -> None:
    """Write the checkpoint atomically, so an interrupted job never leaves half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # CPU tensors: the checkpoint then loads on any machine without map_location.
    state = {name: tensor.cpu() for name, tensor in model.module.state_dict().items()}
    partial = target.with_name(f"{target.name}.tmp{os.getpid()}")
    checkpoint = {
        "epoch": epoch,
        "loss": loss,
        "model_state_dict": state,
        "optimizer_state_dict": optimizer.state_dict(),
    }
    torch.save(checkpoint, partial)
    os.replace(partial, target)


def load_checkpoint(
    args: argparse.Namespace,
    model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    info: DistInfo,
) -> int:
    """The last finished epoch (0: none), with the model and optimizer restored on every rank.

    Rank 0 reads the file and broadcasts it, so the other ranks need not see
    the file (rank 0 must: it wrote it, or shares its filesystem).
    """
    found = [None]
    if info.is_main and not args.fresh and Path(args.checkpoint).is_file():
        found[0] = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    dist.broadcast_object_list(found, src=0)
    checkpoint = found[0]
    if checkpoint is None:
        return 0
    model.module.load_state_dict(checkpoint["model_state_dict"])
    if "optimizer_state_dict" in checkpoint:
        optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    epoch = int(checkpoint["epoch"])
    if info.is_main:
        attempt = os.environ.get("CLUSTERLAUNCH_RESTART_COUNT", "0")
        say(
            f"resuming from {args.checkpoint} after epoch {epoch} (loss {checkpoint['loss']:.4f}, "
            f"restart count {attempt}, world size {info.world_size})"
        )
    return epoch


def check_args(args: argparse.Namespace, info: DistInfo) -> None:
    """Reject a --fail-rank outside the job; every rank decides the same way."""
    if args.fail_at_epoch is not None and not 0 <= args.fail_rank < info.world_size:
        if info.is_main:
            say(f"--fail-rank {args.fail_rank}: ranks are 0-{info.world_size - 1}", err=True)
        finish(2)


def train(args: argparse.Namespace, info: DistInfo) -> None:
    """The training loop; rank 0 logs every epoch and saves the checkpoint."""
    dataset = make_dataset(args.samples, args.seed)
    sampler = DistributedSampler(
        dataset, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=args.seed
    )
    loader = DataLoader(
        dataset, args.batch_size, sampler=sampler, pin_memory=info.device.type == "cuda"
    )
    model = make_model(info, args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    done = load_checkpoint(args, model, optimizer, info)
    if info.is_main:
        say(
            f"training on {info.world_size} rank(s) ({info.backend}, {info.device.type}): "
            f"{args.samples} samples, {len(sampler)} per rank, batch {args.batch_size}"
        )
    start, loss = time.perf_counter(), float("nan")
    for epoch in range(done + 1, args.epochs + 1):
        maybe_fail(args, info, epoch)
        # A different shuffle each epoch, the same on every rank, whatever the world size.
        sampler.set_epoch(epoch)
        loss = train_epoch(model, loader, optimizer, info)
        if info.is_main:
            save_checkpoint(args.checkpoint, model, optimizer, epoch, loss)
            say(f"epoch {epoch}/{args.epochs} loss {loss:.4f}")
        time.sleep(args.pace)
    if info.is_main:
        elapsed = time.perf_counter() - start
        say(f"done in {elapsed:.2f} s, checkpoint saved to {args.checkpoint}")


def main() -> None:
    """Parse, join the group, train, leave together."""
    args = parse_args()
    info = setup()
    check_args(args, info)
    train(args, info)
    finish(0)


if __name__ == "__main__":
    main()
