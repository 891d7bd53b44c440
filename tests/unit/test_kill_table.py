"""``kill``'s table has a row for each node of a job (``run`` or ``exec``), found running or not.

Each host answers for its own agents only, and once one node is killed the job's
controller stops the others, often before their host's ``kill`` looks: they were
left out, and the table of a 3-node job showed one row.
"""

from __future__ import annotations

from clusterlaunch.core.render import kill_text
from clusterlaunch.core.reports import KillReport
from clusterlaunch.remote.jobctl import node_count

TORCHRUN = ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes", "3", "--node-rank"]


def test_nodes_no_host_had_running_are_rows_too() -> None:
    assert kill_text("j1", [KillReport("node2", 2, True, 0.11, nodes=3)]).splitlines() == [
        "job j1:",
        "host   node  state      after",
        "-      0     not found  -",
        "-      1     not found  -",
        "node2  2     stopped    0.11 s",
    ]


def test_a_job_of_unsaid_size_lists_the_nodes_found() -> None:
    """An older agent's ``exec`` record does not say how many nodes it has: none is invented."""
    reports = [KillReport("b", 1, False, 60.0), KillReport("a", 0, True, 0.2)]
    assert kill_text("j2", reports).splitlines()[2:] == [
        "a     0     stopped        0.20 s",
        "b     1     STILL RUNNING  60.00 s",
    ]


def test_the_node_count_is_torchruns_of_a_run_only() -> None:
    """An older agent's record, without ``nodes``: a run's torchrun says, an exec does not."""
    run = {"command": [*TORCHRUN, "2", "train.py"], "tail_dir": "/tmp/clusterlaunch-0/j@x"}
    assert node_count(run) == 3
    exec_of_torchrun = {"command": [*TORCHRUN, "2", "train.py"], "tail_dir": None}
    assert node_count(exec_of_torchrun) is None  # the user's own torchrun, under exec
    assert node_count({"command": ["--nnodes"], "tail_dir": "t"}) is None
    assert node_count({"command": ["x", "--nnodes", "auto", "y"], "tail_dir": "t"}) is None
    assert node_count({}) is None


def test_the_records_node_count_comes_first_for_exec_and_run_alike() -> None:
    """Each agent is told its job's node count (``--nodes``) and its record keeps it."""
    exec_record = {"command": ["sh", "-c", "sleep 600"], "tail_dir": None, "nodes": 3}
    assert node_count(exec_record) == 3
    run = {"command": [*TORCHRUN, "2", "t.py"], "tail_dir": "/tmp/x/j@y", "nodes": 3}
    assert node_count(run) == 3
