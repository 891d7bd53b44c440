"""How a job ends on its hosts: each process gets SIGTERM once, torchrun's noise stays hidden.

Real torchrun gloo jobs on the simulated cluster. ``termcount.py`` ranks write one
line per SIGTERM they receive (``sigtimedwait``: one at a time, with the sender).
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.cluster.support import start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

TWO_NODES = [("node0", 1), ("node1", 2)]  # node1's torchrun has two workers


def sigterms(count_dir: Path, ranks: list[int]) -> dict[int, list[str]]:
    """Each rank's SIGTERM lines (who sent each)."""
    return {rank: (count_dir / f"rank-{rank}").read_text().splitlines() for rank in ranks}


def run_counting(tmp_path: Path, sim_cluster, *options: str, grace: str = "10"):  # type: ignore[no-untyped-def]
    count_dir = tmp_path / "counts"
    count_dir.mkdir()
    hosts = write_hosts(tmp_path / "hosts.yaml", TWO_NODES)
    argv = ("--grace", grace, "--env", f"COUNT_DIR={count_dir}", *options)
    process = start_cli("run", sim_cluster, *argv, str(hosts), "termcount.py")
    return process, count_dir


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_graceful_teardown_sends_each_rank_one_sigterm(
    sim_cluster, tmp_path: Path, assert_no_orphans, signum: int
) -> None:
    # The agent signalled each worker's group and the worker (its leader), then torchrun
    # passed its own SIGTERM on: 2-3 each, and a handler still saving a checkpoint re-ran.
    process, count_dir = run_counting(tmp_path, sim_cluster)
    try:
        wait_for_lines(process, b"counting", 3, timeout=90)
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 128 + signum, err.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out.count(b"leaving after a SIGTERM") == 3, out.decode()  # graceful: not killed
    assert {rank: len(lines) for rank, lines in sigterms(count_dir, [0, 1, 2]).items()} == {
        0: 1,
        1: 1,
        2: 1,
    }, sigterms(count_dir, [0, 1, 2])
    assert_no_orphans(sim_cluster, timeout=4.0)


def test_a_grace_past_torchruns_30_s_is_honoured_with_one_sigterm(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    # torchrun SIGKILLed its workers 30 s after their SIGTERM whatever --grace said
    # (its own shutdown timeout): a 33 s checkpoint under --grace 40 never finished.
    process, count_dir = run_counting(tmp_path, sim_cluster, "--env", "LINGER_S=33", grace="40")
    try:
        wait_for_lines(process, b"counting", 3, timeout=90)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=90)
        assert process.returncode == 128 + signal.SIGTERM, err.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out.count(b"leaving after a SIGTERM") == 3, out.decode()[-3000:] + err.decode()[-3000:]
    counts = sigterms(count_dir, [0, 1, 2])
    assert {rank: len(lines) for rank, lines in counts.items()} == {0: 1, 1: 1, 2: 1}, counts
    assert_no_orphans(sim_cluster, timeout=4.0)


def test_a_teardown_after_a_failed_rank_sends_each_rank_one_sigterm(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    # Rank 2 fails on node1: its torchrun stops rank 1 itself, node0's agent is told to
    # tear down rank 0. Each of them gets one SIGTERM.
    process, count_dir = run_counting(tmp_path, sim_cluster, "--env", "FAIL_RANK=2")
    try:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 3, err.decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "rank 2 on node1 exited with code 3" in err.decode()
    assert out.count(b"leaving after a SIGTERM") == 2, out.decode()
    counts = sigterms(count_dir, [0, 1])
    assert {rank: len(lines) for rank, lines in counts.items()} == {0: 1, 1: 1}, counts
    assert_no_orphans(sim_cluster, timeout=4.0)


def test_torchrun_shutdown_lines_stay_hidden_when_the_hosts_stop_by_themselves(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans
) -> None:
    # A suspended controller: every agent hears no heartbeat and tears down by itself.
    # Resumed, the controller hid the torchrun lines of the first host it read only
    # ("Received 15 death signal" and "Sending process N closing signal" of the others
    # reached the console).
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    argv = ("--heartbeat-timeout", "2", "--grace", "2", str(hosts), "sleeper.py")
    process = start_cli("run", cluster, *argv)
    try:
        wait_for_lines(process, b" up", 3, timeout=90)
        process.send_signal(signal.SIGSTOP)
        time.sleep(6)  # 2 s to notice, then each torchrun stops its worker and says so
        process.send_signal(signal.SIGCONT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    text = err.decode()
    assert process.returncode == 255, text
    assert "the hosts lost touch with the controller" in text
    assert "death signal" not in text and "closing signal" not in text, text
    assert re.search(r"hid \d+ line\(s\) of torchrun shutdown output", text), text
    assert_no_orphans(cluster, timeout=4.0)
