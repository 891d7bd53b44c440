"""Pure parts of the remote agent: its JSON encoder and its argument parser."""

from __future__ import annotations

import json

import pytest

from clusterlaunch.remote.records import to_json
from clusterlaunch.remote.rootcause import root_cause_complete
from clusterlaunch.remote.wire import parse_args


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        3.25,
        "",
        'quote " backslash \\ newline \n tab \t cr \r bell \x07 nul \x00',
        "naïve ☃ 日本",
        [1, "a", None, [2.5]],
        {"b": 1, "a": {"nested": ["x", False]}, "event": "exit"},
    ],
)
def test_to_json_round_trips_through_the_real_parser(value: object) -> None:
    assert json.loads(to_json(value)) == value


def test_to_json_refuses_what_it_cannot_encode() -> None:
    with pytest.raises(TypeError):
        to_json({"x": object()})


def test_parse_args() -> None:
    args = parse_args(
        ["--job-id", "j", "--node-rank", "2", "--grace", "1.5", "--heartbeat-timeout", "20",
         "--tail-dir", "/t", "--", "python", "-m", "torch.distributed.run", "--", "x"]
    )  # fmt: skip
    assert (args.job_id, args.node_rank, args.grace, args.tail_dir) == ("j", 2, 1.5, "/t")
    assert args.heartbeat_timeout == 20.0 and args.first_rank == 0
    assert args.argv == ["python", "-m", "torch.distributed.run", "--", "x"]


TIMES = ["--grace", "5", "--heartbeat-timeout", "15"]  # required: the planner always passes them


@pytest.mark.parametrize(
    "argv",
    [
        ["--job-id", "j", "--node-rank", "0", "--grace", "5", "--", "x"],  # no heartbeat timeout
        ["--job-id", "j", "--node-rank", "0", "--heartbeat-timeout", "5", "--", "x"],  # no grace
        [*TIMES, "--job-id", "j", "--node-rank", "0"],  # no -- and no command
        [*TIMES, "--job-id", "j", "--node-rank", "0", "--"],  # no command
        [*TIMES, "--node-rank", "0", "--", "x"],  # no job id
        [*TIMES, "--job-id", "j", "--node-rank", "zero", "--", "x"],
        [*TIMES, "--job-id", "j", "--node-rank", "0", "--bogus", "1", "--", "x"],
        [*TIMES, "--job-id", "j", "--node-rank", "--", "x"],
        [*TIMES, "--job-id", "j", "--node-rank", "0", "--grace", "soon", "--", "x"],
    ],
)
def test_parse_args_refuses_bad_input(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)


def test_root_cause_complete_needs_the_closing_rule() -> None:
    head = "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
    assert not root_cause_complete(head)
    assert root_cause_complete(head + "=" * 60 + "\n")
    assert not root_cause_complete("no block here\n" + "=" * 60)
