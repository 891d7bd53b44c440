"""The benchmark harness's pure helpers: statistics, targets, the table, merging.

Nothing here runs a benchmark (that needs a simulated cluster and minutes).
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from benchmarks import overhead, report
from benchmarks.core import (
    INFO,
    MISS,
    PAIRED,
    PASS,
    Result,
    Target,
    evaluate,
    format_table,
    format_value,
    ratio_to_baseline,
    rotate,
    summarize,
    summary_counts,
)
from benchmarks.processes import BenchError
from benchmarks.report import merge_results, order_entries
from clusterlaunch.remote import storewait


def test_summarize_min_median_max() -> None:
    assert summarize([3.0, 1.0, 2.0]) == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    assert summarize([1.0, 2.0, 3.0, 10.0])["median"] == 2.5
    empty = summarize([])
    assert empty["n"] == 0 and math.isnan(empty["median"])


def _pair() -> dict[str, Result]:
    pdsh = Result("f.pdsh", "fanout", "pdsh", "s", [2.0, 1.0, 3.0], role="baseline")
    one = Result("f.cl.1", "fanout", "cl 1 host", "s", [0.4, 0.5, 0.6])
    cl = Result(
        "f.cl",
        "fanout",
        "cl 32 hosts",
        "s",
        [0.8, 0.9, 1.0],
        baseline="f.pdsh",
        targets=[
            Target("ratio_max", 0.5, ref="f.pdsh", ref_label="pdsh"),
            Target("ratio_max", 3.0, ref="f.cl.1", ref_label="own 1-host"),
        ],
    )
    return {r.key: r for r in (pdsh, one, cl)}


def test_ratio_targets_use_medians() -> None:
    results = _pair()
    verdict, verdicts = evaluate(results["f.cl"], results)
    assert verdict == PASS  # 0.9 / 2.0 = 0.45 and 0.9 / 0.5 = 1.8
    assert [v.achieved for v in verdicts] == ["0.450×", "1.80×"]
    assert ratio_to_baseline(results["f.cl"], results) == pytest.approx(0.45)
    results["f.cl"].samples = [1.1, 1.2, 1.3]
    assert evaluate(results["f.cl"], results)[0] == MISS


def test_absolute_min_delta_and_problems() -> None:
    fast = Result("t", "teardown", "gone", "s", [0.5, 0.9, 1.4], targets=[Target("max", 1.0)])
    assert evaluate(fast, {})[0] == PASS
    worst = Result(
        "k", "sigkill", "gone", "s", [0.5, 4.5], targets=[Target("max", 4.0, stat="max")]
    )
    assert evaluate(worst, {})[0] == MISS
    ssh = Result("ssh", "throughput", "ssh", "lines/s", [4e6], role="baseline")
    rate = Result(
        "cl", "throughput", "cl", "lines/s", [3e6], targets=[Target("ratio_min", 0.6, ref="ssh")]
    )
    assert evaluate(rate, {"ssh": ssh})[0] == PASS
    rate.problems.append("lost 3 lines")
    assert evaluate(rate, {"ssh": ssh})[0] == MISS
    hand = Result("hand", "overhead", "by hand", "s", [4.0])
    cl = Result("cl", "overhead", "cl", "s", [4.3], targets=[Target("delta_max", 0.5, ref="hand")])
    verdict, verdicts = evaluate(cl, {"hand": hand})
    assert verdict == PASS and verdicts[0].achieved == "+0.300 s"
    assert evaluate(hand, {})[0] == INFO


def test_a_paired_delta_is_the_median_of_the_rounds_differences() -> None:
    # Two groups of job times: the medians land in different groups, the pairs do not.
    hand = Result("hand", "overhead", "by hand", "s", [3.0, 4.0, 3.0, 4.0, 4.0])
    cl = Result("cl", "overhead", "cl", "s", [3.25, 4.25, 3.25, 4.25, 3.25])
    cl.targets.append(Target(PAIRED, 0.5, ref="hand", ref_label="by hand"))
    verdict, verdicts = evaluate(cl, {"hand": hand})
    assert verdict == PASS and verdicts[0].achieved == "+0.250 s (medians: -0.750 s)"
    assert verdicts[0].target.describe("s") == "≤ by hand + 0.500 s, paired"
    cl.samples.append(3.0)  # a round without its pair is no verdict
    assert evaluate(cl, {"hand": hand})[0] == MISS


def test_missing_reference_or_samples_is_not_a_pass() -> None:
    lonely = Result("a", "g", "a", "s", [1.0], targets=[Target("ratio_max", 1.0, ref="gone")])
    assert evaluate(lonely, {})[0] == MISS
    empty = Result("b", "g", "b", "s", [], targets=[Target("max", 1.0)])
    assert evaluate(empty, {})[0] == MISS


def test_target_validation_and_description() -> None:
    with pytest.raises(ValueError):
        Target("ratio_max", 0.5)
    with pytest.raises(ValueError):
        Target("fastest", 1.0)
    assert Target("ratio_max", 0.5, ref="x", ref_label="pdsh").describe("s") == "≤ 0.5× pdsh"
    assert Target("max", 200, stat="max").describe("MB") == "max ≤ 200 MB"
    assert Target("delta_max", 0.5, ref="h", ref_label="by hand").describe("s") == (
        "≤ by hand + 0.500 s"
    )


def test_format_value() -> None:
    assert format_value(1.23456, "s") == "1.23 s"
    assert format_value(0.012345, "s") == "0.0123 s"
    assert format_value(4_350_000, "lines/s") == "4.35 Mlines/s"
    assert format_value(343_000, "lines/s") == "343 klines/s"
    assert format_value(float("nan"), "s") == "–"


def test_table_has_a_row_per_result_and_verdicts() -> None:
    results = _pair()
    table = format_table(list(results.values()))
    lines = table.splitlines()
    assert lines[0].startswith("| measurement ") and set(lines[1]) <= {"|", "-"}
    assert len(lines) == 2 + 3
    assert "fanout: cl 32 hosts" in lines[4] and lines[4].rstrip().endswith("| PASS   |")
    assert "0.450× (vs pdsh)" in lines[4]
    assert len({len(line) for line in lines}) == 1  # aligned
    assert summary_counts(results.values()) == {PASS: 1, MISS: 0, "info": 2}


def test_result_json_round_trip() -> None:
    result = _pair()["f.cl"]
    data = result.to_json()
    assert data["stats"]["median"] == 0.9
    assert Result.from_json(data) == result


def test_merge_and_order_entries() -> None:
    old = [{"name": "fanout", "v": 1}, {"name": "scale", "v": 1}]
    new = [{"name": "fanout", "v": 2}, {"name": "teardown", "v": 2}]
    merged = merge_results(old, new)
    assert {(e["name"], e["v"]) for e in merged} == {("fanout", 2), ("scale", 1), ("teardown", 2)}
    ordered = order_entries(merged, ["fanout", "teardown", "scale"])
    assert [e["name"] for e in ordered] == ["fanout", "teardown", "scale"]


def test_a_failed_rerun_keeps_the_last_good_rows_and_says_so() -> None:
    row = Result("overhead.x", "overhead", "x", "s", samples=[1.0]).to_json()
    good = {"name": "overhead", "date": "d1", "error": None, "results": [row]}
    failed = {"name": "overhead", "date": "d2", "error": "Traceback: boom", "results": []}
    (kept,) = merge_results([good], [failed])
    assert (kept["results"], kept["date"]) == ([row], "d1")
    assert (kept["rerun_error"], kept["rerun_date"]) == ("Traceback: boom", "d2")
    (first,) = merge_results([], [failed])  # nothing good before: the error stands
    assert first is failed
    text = report.markdown({"measurements": [kept]}, None)
    assert "overhead at d2: `Traceback: boom`" in text


def test_rotate_alternates_the_first() -> None:
    assert rotate(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert rotate(["a", "b", "c"], 4) == ["b", "c", "a"]
    assert rotate(["a", "b"], -1) == ["b", "a"]
    assert rotate([], 3) == []


def test_the_clients_comparison_is_part_of_the_main_harness() -> None:
    """paramiko vs OpenSSH comes from ``python -m benchmarks --only clients``."""
    from benchmarks import __main__ as harness
    from benchmarks import clients

    assert harness.MEASUREMENTS["clients"] is clients
    assert harness.selected(["clients"]) == ["clients"]
    args = harness.build_parser().parse_args(["--only", "clients", "--client-sizes", "1,8,32"])
    assert args.client_sizes == "1,8,32"
    samples = {(8, "paramiko"): [(2.0, 0.8), (3.0, 0.4)], (8, "openssh"): [(4.0, 1.6)]}
    rows = {row.key: row for row in clients.results(samples)}
    assert rows["clients.wall.openssh.8"].samples == [4.0]
    assert rows["clients.cpu.openssh.8"].samples == [200.0]  # ms per host
    assert rows["clients.cpu.paramiko.8"].samples == [100.0, 50.0]
    by_key = rows
    ratio = ratio_to_baseline(rows["clients.wall.openssh.8"], by_key)
    assert ratio == pytest.approx(4.0 / 2.5)


def test_the_libraries_rows_compare_each_library_with_paramiko_by_hand() -> None:
    """``--only libraries``: CPU per connection at 32, import CPU apart, ratios to paramiko."""
    from benchmarks import __main__ as harness
    from benchmarks import libraries, sshlibs_client

    assert harness.MEASUREMENTS["libraries"] is libraries
    assert set(libraries.LIBRARIES) == set(sshlibs_client.LIBRARIES) == set(libraries.WHAT)
    one = {"cpu_s": 0.004, "import_cpu_s": 0.07, "wall_s": 0.1, "statuses": [0]}
    many = {"cpu_s": 0.064, "import_cpu_s": 0.08, "wall_s": 0.5, "statuses": [0] * 32}
    cheap = dict(many, cpu_s=0.032)
    rows = {
        row.key: row
        for row in libraries._rows("paramiko", [(one, many)])
        + libraries._rows("libssh2", [(one, cheap)])
    }
    assert rows["libraries.paramiko"].samples == [pytest.approx(2.0)]  # ms per connection
    assert rows["libraries.paramiko"].role == "baseline"
    assert rows["libraries.paramiko.import"].samples == [pytest.approx(80.0)]
    assert rows["libraries.libssh2"].extra["one_host_cpu_ms"] == [4.0]
    assert ratio_to_baseline(rows["libraries.libssh2"], rows) == pytest.approx(0.5)


def test_overhead_phases_come_from_the_wrapper_log(tmp_path: Path) -> None:
    log = tmp_path / "torchrun-times"
    log.write_text("start 100.25\nstart 100.5\nend 104.0\nend 104.75\n")
    assert overhead.phases(log, 100.0, 105.0) == (0.25, 0.25)
    log.write_text("start 100.25\nend 104.0\n")  # one node's torchrun never ran
    with pytest.raises(BenchError, match="did not start and end once on each host"):
        overhead.phases(log, 100.0, 105.0)


def test_the_timing_wrapper_times_torchrun_as_either_node_starts_it(tmp_path: Path) -> None:
    """Node 0's ``-m torch.distributed.run`` and the others' ``-c`` (remote/storewait.py)."""
    log, wrapper = tmp_path / "times", tmp_path / "python"
    wrapper.write_text(overhead._TIMED_PYTHON.format(log=log, python="true", mark=storewait.MARK))
    wrapper.chmod(0o755)
    for argv in (
        ["-m", "torch.distributed.run", "--node-rank", "0"],
        ["-c", storewait.program(3), "--node-rank", "1"],
        ["-c", "import torch.distributed.run"],  # not clusterlaunch's program
        ["-S", "-c", "import zlib"],  # the agent's bootstrap
    ):
        subprocess.run([str(wrapper), *argv], check=True)
    assert [line.split()[0] for line in log.read_text().splitlines()] == [
        "start", "end", "start", "end",
    ]  # fmt: skip


class _Log:
    def __init__(self) -> None:
        self.said: list[str] = []

    def log(self, message: str) -> None:
        self.said.append(message)


def test_a_round_torch_aborted_at_exit_is_run_again_both_ways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The DDP script's rank may abort at interpreter exit (torch, by hand or not): the
    round is run again, both ways, and listed; any other failure ends the measurement."""
    calls: list[str] = []
    aborts = iter([True, False])

    def by_hand(bench: object, job: str) -> tuple[float, float, float]:
        calls.append("ssh")
        if next(aborts):
            raise BenchError("torchrun over ssh exited [0, 1]; node1: exitcode : -6 (SIGABRT)")
        return (2.0, 0.2, 0.01)

    def by_clusterlaunch(bench: object, job: str, hosts: str) -> tuple[float, ...]:
        calls.append("clusterlaunch")
        return (2.1, 0.25, 0.02, "done")

    monkeypatch.setattr(overhead, "by_hand", by_hand)
    monkeypatch.setattr(overhead, "by_clusterlaunch", by_clusterlaunch)
    cl = Result("k", "g", "label", "s")
    bench = _Log()
    measured, done = overhead.paired_round(bench, "ddp", "hosts", 1, cl)  # type: ignore[arg-type]
    assert measured == {"clusterlaunch": (2.1, 0.25, 0.02), "ssh": (2.0, 0.2, 0.01)}
    assert done == "done"  # the finished clusterlaunch command (its peak RSS, its CPU)
    # Round 1 starts by hand; it aborted, so the whole round ran again, both ways.
    assert calls == ["ssh", "ssh", "clusterlaunch"]
    assert cl.extra["repeated_rounds"] == [1] and len(bench.said) == 1

    def fails(bench: object, job: str) -> tuple[float, float, float]:
        raise BenchError("torchrun over ssh exited [1, 0]; node0: address already in use")

    monkeypatch.setattr(overhead, "by_hand", fails)
    with pytest.raises(BenchError, match="address already in use"):
        overhead.paired_round(bench, "ddp", "hosts", 2, cl)  # type: ignore[arg-type]
    assert cl.extra["repeated_rounds"] == [1]
