"""Print one line per rank: where torchrun placed it and what it will compute on.

The first thing to run on a new cluster: if every rank prints and the job exits
0, SSH, the rendezvous and the backend all work. Run it with
``clusterlaunch run hosts.yaml examples/hello_ranks.py`` or, on one machine,
``torchrun --nproc-per-node 2 examples/hello_ranks.py``.
"""

from __future__ import annotations

from _dist import DistInfo, finish, say, setup


def describe(info: DistInfo) -> str:
    """One line with the variables torchrun set and what setup() chose."""
    return (
        f"hello from RANK={info.rank} LOCAL_RANK={info.local_rank} "
        f"WORLD_SIZE={info.world_size} LOCAL_WORLD_SIZE={info.local_world_size} "
        f"host={info.hostname} device={info.device} backend={info.backend}"
    )


def main() -> None:
    """Join the group, say hello, leave together."""
    info = setup()
    say(describe(info))
    finish(0)


if __name__ == "__main__":
    main()
