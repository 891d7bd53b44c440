"""How a job ends on its hosts: each process gets SIGTERM once, torchrun's noise stays hidden.

Real torchrun gloo jobs on the simulated cluster. ``termcount.py`` ranks write one
line per SIGTERM they receive (``sigtimedwait``: one at a time, with the sender).
"""

from __future__ import annotations

import os
import pty
import re
import select
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


def start_saving(tmp_path: Path, sim_cluster, **streams: int):  # type: ignore[no-untyped-def]
    """Two ranks of ``saver.py`` (a 2 s SIGTERM handler), logged in ``tmp_path/logs``."""
    marks, logs = tmp_path / "marks", tmp_path / "logs"
    marks.mkdir()
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    argv = ("--grace", "10", "--log-dir", str(logs), "--env", f"MARK_DIR={marks}")
    process = start_cli("run", sim_cluster, *argv, str(hosts), "saver.py", **streams)
    return process, marks, logs


def assert_saved(logs: Path) -> None:
    """Each rank's handler ran to its end, and its last lines reached --log-dir."""
    for rank in (0, 1):
        text = (logs / f"rank-{rank}.log").read_text()
        assert f"rank {rank} saved, bye" in text, text[-1500:]
        assert f"rank {rank} stderr after saving" in text, text[-1500:]


def wait_for_file(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_two_sighups_from_a_closing_terminal_let_the_handlers_finish(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    # A closing terminal signals the job twice (the kernel, and the shell or terminal
    # passing it on): the second SIGHUP was taken for a second Ctrl-C, and SIGKILL cut
    # the ranks' SIGTERM handlers short ("second interrupt: killing everything now").
    process, _, logs = start_saving(tmp_path, sim_cluster)
    try:
        wait_for_lines(process, b" up", 2, timeout=90)
        process.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        process.send_signal(signal.SIGHUP)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 129, err.decode()[-2000:]
    assert b"killing everything now" not in err, err.decode()[-2000:]
    assert_saved(logs)
    assert_no_orphans(sim_cluster, timeout=4.0)


def test_a_sighup_after_the_terminal_is_gone_lets_the_handlers_finish(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    # The terminal closed: writes fail with EIO (a graceful teardown), then its SIGHUP
    # came, taken for a second interrupt.
    terminal, tty = pty.openpty()
    process, marks, logs = start_saving(tmp_path, sim_cluster, stdout=tty, stderr=tty)
    os.close(tty)
    try:
        read_until(terminal, b" up", 2, timeout=90)
        os.close(terminal)  # the next tick's write fails with EIO: the teardown starts
        wait_for_file(marks / "rank-0", timeout=30)  # a handler is saving
        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=60) == 129
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_saved(logs)
    controller = (logs / "controller.log").read_text()
    assert "killing everything now" not in controller, controller[-2000:]
    assert "job stopped: stdout's terminal was closed" in controller, controller[-2000:]
    assert_no_orphans(sim_cluster, timeout=4.0)


def read_until(fd: int, needle: bytes, count: int, timeout: float) -> bytes:
    """Read ``fd`` (a terminal's side) until ``needle`` was seen ``count`` times."""
    seen = b""
    deadline = time.monotonic() + timeout
    while seen.count(needle) < count:
        left = deadline - time.monotonic()
        assert left > 0, seen[-1500:]
        if select.select([fd], [], [], left)[0]:
            seen += os.read(fd, 65536)
    return seen
