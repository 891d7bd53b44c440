"""The verdict (``decide_outcome``) and its summary line, from scripted host endings.

"Stopped" is what clusterlaunch itself did (its ``--timeout``, a signal it
received, ``clusterlaunch kill``); a rank that exits 124, 130, 137 or 143 on
its own (137: the OOM killer) failed, and the summary names it.
"""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import render
from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.outcome import (
    HostState,
    decide_outcome,
    first_failure,
    is_host_signal,
    signal_stop,
)
from clusterlaunch.core.unreported import lost_without_report
from tests.unit.plans import two_ranks_per_host


def _setup(
    ended: dict[str, dict[str, Any] | None], order: dict[str, int] | None = None
) -> tuple[list[HostState], OutputRouter]:
    plan = two_ranks_per_host()
    hosts = []
    for node in plan.nodes:
        host = HostState(node)
        host.ended, host.done = ended.get(node.host), True
        host.status = 0 if host.ended is not None else None
        host.order = (order or {}).get(node.host, node.node_rank + 1)
        hosts.append(host)
    ranks = [(r, n.host, r - n.first_rank) for n in plan.nodes for r in n.global_ranks]
    router = OutputRouter(Prefixes(ranks, ["a", "b"], False), Console(io.BytesIO(), io.BytesIO()))
    router.rank_output(3, True, b"Killed\n")
    router.host_output("b", True, b"torchrun: worker failed\n")
    return hosts, router


def _rank_died(local_rank: int, exitcode: int, signal: str | None = None) -> dict[str, Any]:
    """An agent's exit event for a torchrun that reported a failed worker."""
    root = {"exitcode": exitcode, "local_rank": local_rank, "signal": signal, "failed_at": 5.0}
    return {"event": "exit", "reason": "exited", "code": 1, "root_cause": root}


TORN_DOWN = {"event": "exit", "reason": "teardown", "code": -15}


@pytest.mark.parametrize(
    ("exitcode", "signal", "code"),
    [(-9, "SIGKILL", 137), (137, None, 137), (130, None, 130), (124, None, 124), (143, None, 143)],
)
def test_a_rank_exiting_with_a_stop_like_code_failed(
    exitcode: int, signal: str | None, code: int
) -> None:
    hosts, router = _setup({"a": TORN_DOWN, "b": _rank_died(1, exitcode, signal)})
    stop = JobOutcome(1, "b failed")  # what the supervisor sets when a host fails
    outcome = decide_outcome(stop, hosts, router.tails)
    assert (outcome.exit_code, outcome.rank, outcome.host, outcome.stopped) == (code, 3, "b", False)
    text = render.outcome_text(outcome)
    assert text.startswith(f"job failed: rank 3 on b exited with code {code}")
    assert ("(SIGKILL)" in text) == (signal is not None)
    assert "  | Killed" in text  # the rank's own last lines


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (130, "interrupted (Ctrl-C)"),
        (143, "terminated (SIGTERM)"),
        (124, "--timeout 8 s reached"),
        (137, "the job was killed (clusterlaunch kill)"),
    ],
)
def test_what_clusterlaunch_did_itself_is_a_stop(code: int, reason: str) -> None:
    # Ranks fail while being torn down; the first cause (ours) still decides.
    hosts, router = _setup({"a": TORN_DOWN, "b": _rank_died(0, -15, "SIGTERM")})
    outcome = decide_outcome(JobOutcome(code, reason, stopped=True), hosts, router.tails)
    assert (outcome.exit_code, outcome.stopped) == (code, True)
    assert render.outcome_text(outcome) == f"job stopped: {reason}"


def test_a_stop_with_no_failed_rank_is_that_stop() -> None:
    hosts, router = _setup({"a": TORN_DOWN, "b": TORN_DOWN})
    stop = JobOutcome(124, "--timeout 1 s reached", stopped=True)
    assert decide_outcome(stop, hosts, router.tails) is stop


@pytest.mark.parametrize(
    ("code", "reason"), [(124, "--timeout 2 s reached (still running: b)"), (130, "interrupted")]
)
def test_a_stop_also_names_the_hosts_that_failed_before_it(code: int, reason: str) -> None:
    """exec without --fail-fast: a's failure stopped nothing; the stop decides the status,
    and the summary still names every host that failed, with its code."""
    hosts, router = _setup({"a": {"event": "exit", "reason": "exited", "code": 3}, "b": TORN_DOWN})
    hosts[0].ended_before_stop = True
    outcome = decide_outcome(JobOutcome(code, reason, stopped=True), hosts, router.tails)
    assert (outcome.exit_code, outcome.stopped) == (code, True)
    assert render.outcome_text(outcome) == f"job stopped: {reason}; failed before that: a (3)"


def test_first_rank_to_fail_decides_across_hosts() -> None:
    later = _rank_died(0, 1)
    later["root_cause"]["failed_at"] = 9.0
    hosts, router = _setup({"a": later, "b": _rank_died(1, -9, "SIGKILL")}, {"a": 1, "b": 2})
    outcome = decide_outcome(JobOutcome(1, "a failed"), hosts, router.tails)
    assert (outcome.exit_code, outcome.rank) == (137, 3)  # b's worker died first


def test_a_lost_host_is_reported_with_its_name() -> None:
    hosts, router = _setup({"a": TORN_DOWN})
    hosts[1].lost = True
    outcome = decide_outcome(
        JobOutcome(ExitStatus.HOST_LOST, "host b was lost"), hosts, router.tails
    )
    assert outcome == JobOutcome(255, "host b was lost", host="b")
    assert render.outcome_text(outcome) == "job failed: host b was lost"


def test_a_host_failing_without_a_root_cause_is_named() -> None:
    ended = {"event": "exit", "reason": "exited", "code": 143}
    hosts, router = _setup({"a": TORN_DOWN, "b": ended})
    outcome = decide_outcome(JobOutcome(143, "b failed"), hosts, router.tails)
    assert (outcome.exit_code, outcome.host, outcome.stopped) == (143, "b", False)
    assert render.outcome_text(outcome).startswith("job failed: b exited with code 143")


def test_a_torchrun_killed_by_a_signal_says_so_and_quotes_none_of_its_lines() -> None:
    """It was 'b exited with code 137' over torchrun's last warning, unrelated: as if it
    had failed by itself, and nothing told it from clusterlaunch kill's 137."""
    hosts, router = _setup({"a": TORN_DOWN, "b": {"event": "exit", "reason": "exited", "code": -9}})
    outcome = decide_outcome(JobOutcome(137, "b failed"), hosts, router.tails)
    assert outcome == JobOutcome(
        137, "torchrun on b was killed by SIGKILL, not by clusterlaunch (exit code 137)", host="b"
    )
    assert render.outcome_text(outcome) == f"job failed: {outcome.reason}"


def test_an_exec_command_killed_by_a_signal_keeps_its_last_lines() -> None:
    hosts, router = _setup({"a": TORN_DOWN, "b": {"event": "exit", "reason": "exited", "code": -9}})
    hosts[1].node = replace(hosts[1].node, argv=("sh", "-c", "make"))
    outcome = decide_outcome(JobOutcome(137, "b failed"), hosts, router.tails)
    assert (
        outcome.reason
        == "the command on b was killed by SIGKILL, not by clusterlaunch (exit code 137)"
    )
    assert outcome.tail == ["torchrun: worker failed"]  # here: the command's own line


def test_exec_without_fail_fast_lists_every_failed_host() -> None:
    done = {"event": "exit", "reason": "exited", "code": 0}
    hosts, router = _setup({"a": {**done, "code": 130}, "b": done})
    outcome = decide_outcome(None, hosts, router.tails)
    assert (outcome.exit_code, outcome.host, outcome.stopped) == (130, "a", False)
    assert render.outcome_text(outcome).startswith("job failed: 1 of 2 host(s) failed: a (130)")
    hosts, router = _setup({"a": done, "b": done})
    assert decide_outcome(None, hosts, router.tails) == JobOutcome(0, "all hosts finished")


def test_of_several_lost_hosts_the_first_to_end_is_named() -> None:
    hosts, router = _setup({}, {"a": 2, "b": 1})
    for host in hosts:
        host.lost = True
    outcome = decide_outcome(
        JobOutcome(ExitStatus.HOST_LOST, "host a was lost"), hosts, router.tails
    )
    assert (outcome.exit_code, outcome.host) == (255, "b")


def test_a_255_stop_without_a_lost_host_is_judged_like_any_failure() -> None:
    # The hosts stopped the job themselves (they lost the controller): no host was lost.
    hosts, router = _setup({"a": TORN_DOWN, "b": TORN_DOWN})
    stop = JobOutcome(ExitStatus.HOST_LOST, "the hosts lost touch with the controller")
    assert decide_outcome(stop, hosts, router.tails) is stop


@pytest.mark.parametrize(
    ("ended", "status", "code"),
    [
        ({"event": "exit", "reason": "exited", "code": -6}, 1, 134),  # the report wins
        ({"event": "exit", "reason": "start-failed", "code": None}, 127, 127),
        (None, 0, 0),  # no report: the channel's status
        (None, None, 255),  # neither: a lost host
    ],
)
def test_a_hosts_code(ended: dict[str, Any] | None, status: int | None, code: int) -> None:
    host = HostState(two_ranks_per_host().nodes[0], ended=ended, status=status)
    assert host.code == code


def test_failures_without_timestamps_are_ordered_as_the_controller_heard_them() -> None:
    first, second = _rank_died(0, 3), _rank_died(1, 4)
    first["root_cause"]["failed_at"] = second["root_cause"]["failed_at"] = None
    hosts, router = _setup({"a": first, "b": second}, {"a": 2, "b": 1})
    assert first_failure(hosts) is hosts[1]
    outcome = decide_outcome(JobOutcome(1, "b failed"), hosts, router.tails)
    assert (outcome.exit_code, outcome.rank, outcome.tail) == (4, 3, ["Killed"])


@pytest.mark.parametrize(
    ("reason", "code", "name"),
    [("signal 15", 143, "SIGTERM"), ("signal 1", 129, "SIGHUP"), ("signal 2", 130, "SIGINT")],
)
def test_a_signal_the_agent_got_itself_is_a_stop_with_128_plus_n(
    reason: str, code: int, name: str
) -> None:
    stop = signal_stop("b", {"event": "stopping", "reason": reason})
    assert stop == JobOutcome(
        code, f"the agent on b got {name} (scancel, a time limit, a shutdown?)", "b", stopped=True
    )
    assert is_host_signal(stop)
    hosts, router = _setup({"a": TORN_DOWN, "b": _rank_died(0, -15, "SIGTERM")})
    assert decide_outcome(stop, hosts, router.tails) == stop  # the ranks died of it
    assert render.outcome_text(stop).startswith("job stopped: the agent on b got")


@pytest.mark.parametrize(
    "event",
    [
        {"event": "stopping", "reason": "requested"},
        {"event": "stopping", "reason": "killed"},
        {"event": "stopping", "reason": "signal x"},
        {"event": "exit", "reason": "signal 15", "code": -15},
        {"event": "started"},
    ],
)
def test_other_events_are_no_signal_stop(event: dict[str, Any]) -> None:
    assert signal_stop("a", event) is None


def test_stops_of_our_own_do_not_name_a_host() -> None:
    assert not is_host_signal(JobOutcome(143, "terminated (SIGTERM)", stopped=True))
    assert not is_host_signal(JobOutcome(1, "b failed", host="b"))


def test_a_lost_host_outweighs_the_signals_its_loss_sent_the_others() -> None:
    # A Slurm node fails: Slurm cancels the job's other steps (their agents get
    # SIGTERM), and the failed node's srun ends without a report.
    hosts, router = _setup({"a": TORN_DOWN, "b": None})
    hosts[1].lost = True
    stop = signal_stop("a", {"event": "stopping", "reason": "signal 15"})
    assert stop is not None
    outcome = decide_outcome(stop, hosts, router.tails)
    assert outcome == JobOutcome(255, "host b was lost", host="b")


@pytest.mark.parametrize(
    ("status", "lost"),
    [(None, True), (255, True), (0, True), (1, False), (127, False), (143, False)],
)
def test_which_endings_without_a_report_are_a_lost_host(status: int | None, lost: bool) -> None:
    assert lost_without_report(status) is lost


def test_a_python_that_is_no_python_is_named_with_its_fix() -> None:
    """``python: /bin/bash`` (``env``, ``cat``, ``perl``): exec exited with the program's own
    status (2, 125, 1, 29) and said "the shell failed ... before clusterlaunch's Python
    started"; check and run quoted bash's syntax error. Now one line: python: and its fix."""
    from clusterlaunch.core.reports import shell_failure
    from clusterlaunch.core.setupguard import SetupWatch
    from clusterlaunch.core.unreported import unreported_end

    fix = "set python: to a Python 3.8 or newer in the hosts file (or --python)"
    for status, tail in ((2, "/bin/bash: -S: invalid option"), (125, ""), (1, ""), (29, "")):
        code, said, lost = unreported_end(
            status, SetupWatch("h", expected=False), False, [tail], "/bin/x"
        )
        assert (code, lost) == (2, False)
        before = f"(it exited {status} before clusterlaunch's Python started)"
        assert said == f"python: /bin/x is not a Python {before}; {fix}"
        assert shell_failure("/bin/x", status, tail) == said
    # What something else explains keeps its own words and status.
    cd_failed = "bash: line 1: cd: /nope: No such file or directory"
    assert unreported_end(1, SetupWatch("h", expected=False), False, [cd_failed], "/bin/x")[0] == 1
    assert "python:" not in shell_failure("/bin/x", 1, "srun: error: Slurm job 4 has expired")
    assert "python: /bin/x" not in shell_failure("/bin/x", 127, "bash: /bin/x: not found")
    assert (
        unreported_end(137, SetupWatch("h", expected=False), False, [], "/bin/x")[0] == 137
    )  # a signal
    assert (
        unreported_end(98, SetupWatch("h", expected=False), False, [], "/bin/x")[0] == 98
    )  # stdin cut short


# How torch says its store could not listen: with libuv (torch >= 2.4), and before it.
PORT_TAKEN = [
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
    "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
    "address already in use",
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
    "network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address "
    "already in use). The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - "
    "Address already in use).",
]
TORCHRUN_FAILED = {"event": "exit", "reason": "exited", "code": 1, "root_cause": None}


def _first_summary_line(last_line: str, hosts: tuple[str, str] = ("a", "b")) -> str:
    """The summary's first line when node 0's torchrun failed with ``last_line`` last."""
    plan = two_ranks_per_host(hosts)
    states = [HostState(node, done=True, status=0, order=node.node_rank + 1) for node in plan.nodes]
    states[0].ended, states[1].ended = TORCHRUN_FAILED, TORN_DOWN
    ranks = [(r, n.host, r - n.first_rank) for n in plan.nodes for r in n.global_ranks]
    console = Console(io.BytesIO(), io.BytesIO())
    router = OutputRouter(Prefixes(ranks, list(hosts), False), console)
    router.host_output(
        hosts[0], True, f"Traceback (most recent call last):\n{last_line}\n".encode()
    )
    outcome = decide_outcome(JobOutcome(1, f"{hosts[0]} failed"), states, router.tails)
    assert (outcome.exit_code, outcome.host) == (1, hosts[0])
    return render.outcome_text(outcome).splitlines()[0]


@pytest.mark.parametrize("said", PORT_TAKEN)
def test_node_0_s_torchrun_finding_the_master_port_taken_is_said_in_one_line(said: str) -> None:
    assert _first_summary_line(said) == (
        "job failed: a exited with code 1: its torchrun could not listen on the master port "
        "29500, which something else took after the preflight had checked it free "
        "(EADDRINUSE); run again with master_port: auto (--master-port auto), or free the "
        "port or choose another"
    )


@pytest.mark.parametrize(
    "said",
    [
        "RuntimeError: [gloo/transport/tcp/pair.cc:] bind: Address already in use",  # not the store
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
        "local network address. port: 29500, code: -13, name: EACCES, message: permission denied",
    ],
)
def test_other_failures_of_a_torchrun_get_no_port_line(said: str) -> None:
    assert _first_summary_line(said) == "job failed: a exited with code 1"


def test_troubleshooting_quotes_the_port_line() -> None:
    quoted = _quoted_line("docs/troubleshooting.md", "clusterlaunch: job failed: node0 exited")
    real = _first_summary_line(PORT_TAKEN[0], hosts=("node0", "node1"))
    assert quoted == "clusterlaunch: " + real.replace("29500", "42875")


def _quoted_line(doc: str, start: str) -> str:
    text = (Path(__file__).resolve().parents[2] / doc).read_text()
    return next(line for line in text.splitlines() if line.startswith(start))
