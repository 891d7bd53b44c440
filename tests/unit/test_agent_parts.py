"""Pure parts of the remote agent: its events and its argument parser (the standard library's)."""

from __future__ import annotations

import pytest

from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.protocol import SYNC
from clusterlaunch.remote.rootcause import root_cause_complete
from clusterlaunch.remote.wire import Output, parse_args


def test_events_are_json_with_statuses_as_numbers() -> None:
    out = Output(fd=-1)
    out.event(
        event="exit", code=ExitStatus.NOT_STARTED, message='caf\u00e9 " \n', extra=[1.5, None]
    )
    (frame,) = FrameDecoder().feed(SYNC + b"".join(out.queue))
    assert frame.event() == {
        "event": "exit",
        "code": 127,
        "message": 'caf\u00e9 " \n',
        "extra": [1.5, None],
    }
    assert b'"code": 127' in frame.data  # the number, not the enum's name


def test_parse_args() -> None:
    args = parse_args(
        ["--job-id", "j", "--node-rank", "2", "--grace", "1.5", "--heartbeat-timeout", "20",
         "--rank-files", "--", "python", "-m", "torch.distributed.run", "--", "x"]
    )  # fmt: skip
    assert (args.job_id, args.node_rank, args.grace, args.rank_files) == ("j", 2, 1.5, True)
    assert args.heartbeat_timeout == 20.0 and args.first_rank == 0
    assert args.argv == ["python", "-m", "torch.distributed.run", "--", "x"]


def test_parse_args_leaves_the_jobs_words_alone() -> None:
    """After the first ``--`` everything is the job's, options like the agent's own included."""
    job = ["sh", "-c", "echo", "--job-id", "other", "--grace", "-1", "--", "--help"]
    args = parse_args(["--job-id", "j", "--node-rank", "0", *TIMES, "--", *job])
    assert (args.job_id, args.grace, args.argv) == ("j", 5.0, job)
    with pytest.raises(SystemExit):  # abbreviations are not the planner's words
        parse_args(["--job", "j", "--node-rank", "0", *TIMES, "--", "x"])


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
