"""``localhost``'s commands are the controller's children: closing its connection waits
for them, so the controller never exits with one of its probes or agents still running
(a script's next command found a failed ``check``'s probe still holding the master port)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from clusterlaunch.testing import find_processes
from clusterlaunch.transport.local import LocalConnection, end_processes

ROOT = Path(__file__).resolve().parents[2]


def test_closing_waits_for_a_command_that_ends_after_its_eof() -> None:
    connection = LocalConnection()
    process = connection.start("cat >/dev/null; sleep 1; exit 3")
    connection.close()
    assert process.exit_status() == 3  # it ended by itself before close returned
    process.close()


def test_a_command_still_writing_is_not_left_waiting_for_a_reader() -> None:
    """Our ends of its pipes close as when the controller exits: its writes fail at once
    (agents go on with their teardown), where a full pipe held it until the SIGTERM."""
    connection = LocalConnection()
    process = connection.start("cat >/dev/null; head -c 1000000 /dev/zero; exit 3")
    connection.close()
    assert process.exit_status() == 3  # not 143: it was not still blocked at the wait's end


def test_a_command_that_outstays_the_wait_gets_sigterm() -> None:
    connection = LocalConnection()
    process = connection.start("trap 'exit 7' TERM; cat >/dev/null; while :; do sleep 0.1; done")
    started = time.monotonic()
    end_processes([process], wait=0.5)  # what close does, with a shorter wait
    assert process.exit_status() == 7 and time.monotonic() - started < 2.5
    process.close()


def test_a_failed_check_on_localhost_leaves_no_probe_behind(tmp_path: Path) -> None:
    """Before, the probe outlived the controller in 4 runs of 12 on a loaded machine."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    check = ["check", "--workdir", "/tmp", str(hosts), "nosuch.py"]
    for attempt in range(3):
        marker = f"cl-local-children-{os.getpid()}-{attempt}"
        done = subprocess.run(
            [sys.executable, "-m", "clusterlaunch", *check],
            env={**os.environ, "PYTHONPATH": str(ROOT), "CLUSTERLAUNCH_SIM_HOST": marker},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "nosuch.py' not found in /tmp" in done.stdout + done.stderr, done
        assert done.returncode == 2, done
        assert [p.cmdline for p in find_processes([marker])] == []
