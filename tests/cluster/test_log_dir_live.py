"""``--log-dir`` files hold what the console showed, as it shows it: ``tail -f`` follows a
job, and a controller killed outright (SIGKILL, Ctrl-\\, the OOM killer) leaves them whole.

They were buffered and written out at the end only: after minutes of output every file
was still empty, and a SIGKILLed controller left them so for good.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cluster.support import rank_lines, start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]


def test_the_files_hold_what_was_shown_and_outlive_a_killed_controller(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    logs = tmp_path / "logs"
    argv = ("--grace", "2", "--log-dir", str(logs), str(hosts), "sleeper.py")
    process = start_cli("run", sim_cluster, *argv)
    try:
        shown = rank_lines(b"".join(wait_for_lines(process, b" up", 2, timeout=90)).decode())
        assert sorted(rank for rank, *_ in shown) == [0, 1]

        def assert_in_the_files() -> None:
            for rank, _, _, text in shown:
                assert (logs / f"rank-{rank}.log").read_text() == text + "\n"
            header = (logs / "controller.log").read_text()
            assert "clusterlaunch: job cl-" in header and "world size 2" in header, header

        assert_in_the_files()  # while the job runs: nothing waits in a buffer
        process.send_signal(signal.SIGKILL)  # nothing of ours runs after this
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_in_the_files()
    assert_no_orphans(sim_cluster, timeout=4.0)  # the agents' stdin ended: grace 2 s + 2 s
