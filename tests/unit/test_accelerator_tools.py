"""A host's device tool run by the probe: one that hangs."""

from __future__ import annotations

import time
from pathlib import Path

from clusterlaunch.remote import accel


def tool(tmp_path: Path, name: str, body: str) -> Path:
    """An executable ``name`` in ``tmp_path/bin`` running ``body`` with /bin/sh."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def running(pid: int) -> bool:
    """``pid`` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def test_a_tool_past_its_time_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """subprocess.run's timeout killed the tool alone: its child slept on, reparented to 1."""
    pid_file = tmp_path / "child.pid"
    hung = tool(tmp_path, "nvidia-smi", f"sleep 60 &\necho $! > {pid_file}\nwait\n")
    started = time.monotonic()
    found = accel._run(str(hung), [], accel.parse_nvidia_smi, timeout=1)
    assert time.monotonic() - started < 5
    assert found == {"gpus": {"error": "no answer within 1 s; it was stopped"}}
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(child)
