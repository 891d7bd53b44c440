"""``doctor --bandwidth``'s worker: times all_reduce like nccl-tests' ``all_reduce_perf``.

Not a bundle: ``clusterlaunch doctor`` sends this file's text as ``python -c``
to torchrun workers started through ``clusterlaunch run``'s own path (so it
needs torch, like any job). NCCL where a GPU is visible, gloo otherwise.
Sizes come as argv; rank 0 prints one ``@@allreduce`` JSON line with the mean
seconds per size (the controller computes algbw and busbw). Ends as the field
notes advise for gloo: barrier, destroy, flush, ``os._exit``.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def mean_seconds(tensor, iterations, device):
    for _ in range(2):  # warm-up: connections, allocator
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dist.barrier()
    started = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / iterations


def main(sizes):
    gpu = torch.cuda.is_available()
    backend = "nccl" if gpu else "gloo"
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    timings = []
    for size in sizes:
        tensor = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        # Fewer rounds for big sizes: 64 MiB over gloo takes ~0.1 s a round here.
        iterations = max(3, min(50, (256 << 20) // max(size, 1) // 16))
        timings.append({"bytes": size, "seconds": mean_seconds(tensor, iterations, device)})
    if dist.get_rank() == 0:
        result = {"backend": backend, "ranks": dist.get_world_size(), "timings": timings}
        print("@@allreduce " + json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


main([int(word) for word in sys.argv[1:]])
