"""Job-level restarts: the pure policy (core/restarts.py) and its command-line part, by equality."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.controller.restartparts import killed_since
from clusterlaunch.core import restarts
from clusterlaunch.core.errors import HostsFileError, JobOutcome
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.hostfile import parse_inventory
from clusterlaunch.core.model import HostSpec
from clusterlaunch.core.render import jobs_text
from clusterlaunch.core.reports import HostReport, PreflightResult, RemoteJob
from clusterlaunch.core.restarts import Layout, RestartPolicy, TooFewHosts, choose_layout
from tests.unit.plans import two_ranks_per_host

A, B, C = HostSpec("a", 2), HostSpec("b", 2), HostSpec("c", 2)
SPARE = HostSpec("s", 2, spare=True)
SMALL_SPARE = HostSpec("t", 1, spare=True)
POLICY = RestartPolicy(max_restarts=2, backoff=3.0, min_hosts=3)


@pytest.mark.parametrize(
    ("outcome", "done", "why"),
    [
        (JobOutcome(0, "all hosts finished"), 0, "the job succeeded"),
        (
            JobOutcome(130, "interrupted (Ctrl-C)", stopped=True),
            0,
            "the job was stopped, not failed",
        ),
        (JobOutcome(137, "killed", stopped=True), 0, "the job was stopped, not failed"),
        (
            JobOutcome(124, "--timeout 8 s reached", stopped=True),
            0,
            "the job was stopped, not failed",
        ),
        (JobOutcome(3, "rank 2 exited with code 3"), 2, "--max-restarts 2 used up"),
        (JobOutcome(3, "rank 2 exited with code 3"), 1, None),
        (JobOutcome(255, "host b was lost"), 0, None),
        # A rank that exits 130 by itself failed: only what clusterlaunch did is "stopped".
        (JobOutcome(130, "rank 0 exited with code 130"), 0, None),
    ],
)
def test_only_a_failure_restarts_and_only_so_often(
    outcome: JobOutcome, done: int, why: str | None
) -> None:
    assert restarts.refusal(outcome, done, POLICY) == why


def test_no_restart_without_max_restarts() -> None:
    assert restarts.refusal(JobOutcome(255, "lost"), 0, RestartPolicy()) == (
        "--max-restarts 0 used up"
    )


def test_backoff_doubles_up_to_the_cap() -> None:
    waits = [restarts.backoff_s(POLICY, n) for n in (1, 2, 3, 4, 5, 6, 7)]
    assert waits == [3.0, 6.0, 12.0, 24.0, 48.0, 60.0, 60.0]
    assert restarts.backoff_s(RestartPolicy(backoff=0.0), 5) == 0.0


def test_a_backoff_over_the_cap_is_waited_in_full_and_the_dry_run_says_so() -> None:
    """--restart-backoff 600 was cut to 60 s while the dry run said 'waiting 600 s'."""
    long = RestartPolicy(max_restarts=3, backoff=600.0)
    assert [restarts.backoff_s(long, n) for n in (1, 2, 3)] == [600.0, 600.0, 600.0]
    assert "waiting 600 s (doubling, at most 600 s)" in restarts.dry_run_text(long, (), ())
    assert restarts.dry_run_fields(long, (), ())["restarts"]["max_backoff_s"] == 600.0


def test_every_host_back_is_the_same_layout() -> None:
    assert choose_layout([A, B, C], [SPARE], {"a", "b", "c", "s"}, 3) == Layout((A, B, C))


def test_a_spare_with_the_same_count_takes_the_lost_hosts_place() -> None:
    layout = choose_layout([A, B, C], [SPARE], {"a", "c", "s"}, 3)
    assert layout == Layout((A, SPARE, C), replaced=(("b", "s"),), replanned=False)
    assert restarts.layout_text(layout, 6) == (
        "b replaced by spare s; 3 host(s), world size 6 (same rank layout)"
    )


def test_a_spare_with_another_count_replans_the_ranks() -> None:
    layout = choose_layout([A, B, C], [SMALL_SPARE], {"a", "c", "t"}, 3)
    assert layout == Layout((A, SMALL_SPARE, C), replaced=(("b", "t"),), replanned=True)


def test_an_unusable_spare_is_skipped_for_the_next() -> None:
    layout = choose_layout([A, B, C], [SPARE, SMALL_SPARE], {"a", "c", "t"}, 3)
    assert layout.hosts == (A, SMALL_SPARE, C)


def test_without_a_spare_the_job_shrinks_to_min_hosts() -> None:
    layout = choose_layout([A, B, C], [], {"a", "c"}, 2)
    assert layout == Layout((A, C), dropped=("b",), replanned=True)
    assert restarts.layout_text(layout, 4) == (
        "b dropped; 2 host(s), world size 4 (ranks re-planned)"
    )


def test_a_lost_node_0_moves_the_master_to_the_next_host() -> None:
    assert choose_layout([A, B, C], [], {"b", "c"}, 2).hosts == (B, C)


def test_too_few_hosts_says_which_and_why_in_one_line() -> None:
    with pytest.raises(TooFewHosts) as caught:
        choose_layout([A, B, C], [], {"a", "c"}, 3, {"b": "connection refused"})
    assert str(caught.value) == ("only 2 usable host(s), --min-hosts is 3: b (connection refused)")
    assert "\n" not in str(caught.value)


def test_too_few_hosts_names_each_spare_that_could_not_take_a_place() -> None:
    """The spare's own reason was left out: only the lost host was named, as if no spare
    had been tried."""
    why = {"b": "no SSH handshake", "s": "connection refused", "t": "torch missing"}
    with pytest.raises(TooFewHosts) as caught:
        choose_layout([A, B, C], [SPARE, SMALL_SPARE], {"a", "c"}, 3, why)
    assert str(caught.value) == (
        "only 2 usable host(s), --min-hosts is 3: b (no SSH handshake); "
        "spare s (connection refused); spare t (torch missing)"
    )


def test_a_host_that_comes_back_takes_its_place_back_from_the_spare() -> None:
    # Every attempt is planned from the hosts file: b is back, so s goes idle again.
    assert choose_layout([A, B, C], [SPARE], {"a", "b", "c", "s"}, 3).hosts == (A, B, C)


def test_restart_count_is_set_only_for_a_job_that_may_restart() -> None:
    assert restarts.count_env(None) == {}
    assert restarts.count_env(2) == {"CLUSTERLAUNCH_RESTART_COUNT": "2"}


def test_dry_run_text_names_the_policy_and_each_spare() -> None:
    text = restarts.dry_run_text(POLICY, [A, B, C], [SPARE, SMALL_SPARE])
    assert text.splitlines() == [
        "# restarts: up to 2 after a failed rank or a lost host, waiting 3 s (doubling, at most "
        "60 s); at least 3 host(s); CLUSTERLAUNCH_RESTART_COUNT in every rank's environment",
        "# spare s (2 process(es)): takes a lost host's node rank and ranks; the world size stays",
        "# spare t (1 process(es)): the process counts differ: ranks are re-planned when it "
        "takes a host's place",
    ]
    assert restarts.dry_run_text(RestartPolicy(), [A], []) == ""


LOCAL = HostSpec("localhost", 2, line=9)


def test_dry_run_warns_of_a_restart_that_makes_localhost_the_master() -> None:
    """Dropping a (node 0) made localhost node 0, and that restart failed: the planner
    refuses a localhost master of several hosts without addr:."""
    shrinks = RestartPolicy(max_restarts=1, min_hosts=1)
    warning = (
        "a restart without a makes localhost (line 9, no addr:) node 0, which cannot be the "
        "master of a multi-host job, and fails; set its addr: (or master_addr:) to an address "
        "the other hosts can reach"
    )
    assert restarts.localhost_master_risk(shrinks, [A, LOCAL, B], [], None) == warning
    assert restarts.dry_run_text(shrinks, [A, LOCAL, B], []).splitlines()[1] == (
        f"# restarts: {warning}"
    )
    assert restarts.dry_run_fields(shrinks, [A, LOCAL, B], [])["restarts"]["warning"] == warning
    spare = restarts.localhost_master_risk(shrinks, [A, LOCAL, B], [SPARE], None)
    assert spare is not None and spare.startswith("a restart without a and no spare takes the")
    safe = [
        ([LOCAL, A, B], None),  # node 0 already: the plan itself refuses it
        ([A, B, LOCAL], None),  # alone once a and b are dropped: one host needs no master
        ([A, HostSpec("localhost", 2, addr="10.0.0.5"), B], None),
        ([A, LOCAL, B], "10.0.0.5"),  # master_addr:
    ]
    for hosts, master in safe:
        assert restarts.localhost_master_risk(shrinks, hosts, [], master) is None, hosts
    assert restarts.localhost_master_risk(POLICY, [A, LOCAL, B], [], None) is None  # never shrinks
    assert "warning" not in restarts.dry_run_fields(POLICY, [A, LOCAL, B], [])["restarts"]


HOSTS = """\
max_restarts: 2
hosts:
  - {host: a, gpus: 2}
  - {host: b, gpus: 2}
  - {host: s, gpus: 2, spare: true}
"""


def test_hosts_file_spare_and_max_restarts() -> None:
    inventory = parse_inventory(HOSTS, "h.yaml")
    assert inventory.max_restarts == 2
    assert [(h.host, h.spare) for h in inventory.hosts] == [("a", False), ("b", False), ("s", True)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "hosts:\n  - {host: a, gpus: 1, spare: yes please}\n",
            "h.yaml:2: hosts[0].spare: must be true or false, got 'yes please'",
        ),
        (
            "max_restarts: -1\nhosts:\n  - {host: a, gpus: 1}\n",
            "h.yaml:1: max_restarts: must be a whole number 0-1,000, got -1",
        ),
        (
            "max_restarts: true\nhosts:\n  - {host: a, gpus: 1}\n",
            "h.yaml:1: max_restarts: must be a whole number 0-1,000, got true",
        ),
        (
            "hosts:\n  - {host: a, gpus: 1, spare: true}\n",
            "h.yaml:2: spare: every host is a spare; mark only idle hosts spare: true",
        ),
    ],
)
def test_bad_restart_fields_name_file_line_and_field(text: str, message: str) -> None:
    with pytest.raises(HostsFileError) as caught:
        parse_inventory(text, "h.yaml")
    assert str(caught.value) == message


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "h.yaml"
    path.write_text(HOSTS)
    return path


def test_dry_run_shows_spares_apart_and_the_policy(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--job-id", "j1", str(hosts), "t.py"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("job j1: 2 host(s), world size 4, master a:AUTO")
    assert "# node 2" not in out  # the spare is no node of the plan
    assert "# restarts: up to 2 after a failed rank" in out  # max_restarts: from the file
    assert "# spare s (2 process(es)): takes a lost host's node rank" in out
    assert out.count("CLUSTERLAUNCH_RESTART_COUNT=0 ") == 2


def test_dry_run_json_carries_the_policy_and_the_spares(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--json", "--job-id", "j1", str(hosts), "t.py"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [node["host"] for node in data["nodes"]] == ["a", "b"]  # the spare is no node
    assert data["restarts"] == {
        "max_restarts": 2,
        "backoff_s": 3.0,
        "max_backoff_s": 60.0,
        "min_hosts": 2,
    }
    assert data["spares"] == [
        {
            "host": "s",
            "nproc": 2,
            "takes_place": True,
            "note": "takes a lost host's node rank and ranks; the world size stays",
        }
    ]


def test_max_restarts_flag_wins_over_the_file(
    hosts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--max-restarts", "0", str(hosts), "t.py"]) == 0
    out = capsys.readouterr().out
    assert "# restarts: none (--max-restarts 0): the spares stay idle" in out
    assert "CLUSTERLAUNCH_RESTART_COUNT" not in out.split("# restarts")[0]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--min-hosts", "3"], "--min-hosts 3: the job has 2 non-spare host(s) (and 1 spare(s)"),
        (["--max-restarts", "0", "--min-hosts", "1"], "--min-hosts 1: it applies to restarts"),
        (["--max-restarts", "-1"], "--max-restarts '-1': use a whole number from 0 to 1,000"),
        (["--restart-backoff", "soon"], "--restart-backoff 'soon': use a number of seconds"),
    ],
)
def test_bad_restart_flags_are_one_line_and_exit_2(
    hosts: Path, flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", *flags, str(hosts), "t.py"]) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"clusterlaunch: error: {error}"), err
    assert err.count("\n") == 1


def test_exec_runs_on_spares_too(hosts: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["exec", "--dry-run", str(hosts), "--", "hostname"]) == 0
    assert "# node 2 (s):" in capsys.readouterr().out


def test_ps_shows_the_attempt() -> None:
    jobs = [
        RemoteJob("j1", "a", 0, 0.0, ("torchrun",), 10, restart_count=2),
        RemoteJob("j2", "b", 0, 0.0, ("torchrun",), 11),
    ]
    rows = jobs_text(jobs).splitlines()
    assert rows[0].split() == ["job", "host", "node", "attempt", "started", "command"]
    assert rows[1].split()[:4] == ["j1", "a", "0", "3"]
    assert rows[2].split()[:4] == ["j2", "b", "0", "1"]


def test_a_kill_counts_from_when_the_host_says_it_came_not_by_its_clock() -> None:
    """A host tells how long ago the id was killed, laid on our clock when its report came:
    a host clock ahead of ours made a kill of the old job, just before a new ``run`` of the
    id, look later than the new job's start, and its restart was cancelled."""
    node = two_ranks_per_host(("a",)).nodes[0]

    def result(killed_ago: float | None, static_at: float | None) -> PreflightResult:
        report = HostReport(node, static={"killed_ago": killed_ago}, static_at=static_at)
        return PreflightResult([report], None)

    started = 1000.0  # the job was asked for then (time.monotonic())
    assert killed_since(result(5.0, 1010.0), started)  # killed at 1005: during the job
    assert not killed_since(result(15.0, 1010.0), started)  # at 995: before it began
    assert not killed_since(result(None, 1010.0), started)  # never killed there
    assert not killed_since(result(5.0, None), started)  # no report
