"""Job records on a host (``remote/records.py``): a finishing agent cleans up after dead ones.

Their files go with their claims: ``test_claims.py``.

Real processes and files; the state directory is a temporary one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.remote import recordfiles, records


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-S", "-c", "import os; print(os.getpid())"],
                          capture_output=True, check=True)  # fmt: skip
    return int(done.stdout)


def _write(folder: Path, name: str, pid: int, start: int | None, tail_dir: str) -> Path:
    path = folder / name
    record = {"agent_pid": pid, "agent_start": start, "tail_dir": tail_dir, "job_id": "job"}
    record.update(node_rank=0, started_at=1.5, command=["python3", "train.py"])
    path.write_text(json.dumps(record))
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A private state directory; and the names of the records read from it."""
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(records, "state_dirs", lambda: [str(folder)])
    monkeypatch.setattr(recordfiles, "state_dirs", records.state_dirs)
    read: list[str] = []
    original = recordfiles.read_record

    def reading(path: str) -> dict | None:
        read.append(os.path.basename(path))
        return original(path)

    monkeypatch.setattr(recordfiles, "read_record", reading)
    return folder, read


def test_a_live_agents_record_is_told_by_its_name_and_not_read(state) -> None:
    folder, read = state
    me, start = os.getpid(), records.process_start_time(os.getpid())
    live = _write(folder, f"job.7.n0.{me}.{start}.json", me, start, "")
    recordfiles.clean_up_after_dead_agents()
    assert live.exists() and read == []


def test_a_dead_agents_record_is_removed(state) -> None:
    folder, read = state
    pid = _dead_pid()
    dead = _write(folder, f"job.n0.{pid}.12345.json", pid, 12345, "")
    recordfiles.clean_up_after_dead_agents()
    assert not dead.exists()
    assert read == [dead.name]


def test_a_record_named_as_before_is_read_and_kept_while_its_agent_lives(state) -> None:
    folder, read = state
    me, start = os.getpid(), records.process_start_time(os.getpid())
    older = _write(folder, f"job.n0.{me}.json", me, start, "")
    recordfiles.clean_up_after_dead_agents()
    assert older.exists() and read == [older.name]


def test_a_name_with_a_recycled_pid_is_read_and_cleaned_up(state) -> None:
    folder, read = state
    me = os.getpid()  # alive, but started at another time than the record says
    recycled = _write(folder, f"job.n0.{me}.1.json", me, 1, "")
    recordfiles.clean_up_after_dead_agents()
    assert not recycled.exists() and read == [recycled.name]


def test_kill_marks_any_id_dated_and_sweeps_marks_a_day_old(state) -> None:
    """A kill leaves a dated mark whether or not the job runs here (it may still be in its
    setup); marks left more than a day before go, so they never pile up (209 once did)."""
    folder, _ = state
    old = folder / "gone.killed"
    old.write_text("")
    two_days = records.time.time() - 2 * records.NOTE_KEEP_S
    os.utime(old, (two_days, two_days))
    before = records.time.time() - 1  # mtime resolution
    assert records.mark_killed("never-ran")
    assert (records.killed_at("never-ran") or 0) >= before
    assert not old.exists()
    assert 0 <= (records.killed_ago("never-ran") or -1) < 5


def test_a_kill_stops_only_a_job_its_controller_started_before(state) -> None:
    """``since``: how long ago the job's controller started (the go says), on this host's
    clock; without it (``exec``), the agent's own start, which its setup came after."""
    records.mark_killed("j")
    assert records.killed_since("j", since=60.0)  # started a minute ago, killed since
    assert not records.killed_since("j", since=0.0)  # started just now, after the kill
    assert records.killed_since("j")  # this process started before the mark
    assert not records.killed_since("other", since=60.0)
    started = records.started_at(os.getpid())
    assert started is not None and started <= records.time.time()


@pytest.mark.parametrize("content", ['{"note": "not a record"}', "{}", "[]", '{"job_id": "j"'])
def test_what_is_no_record_is_never_live_and_never_a_traceback(state, content: str) -> None:
    """A stray ``junk.json`` gave ``ps`` and ``kill`` a traceback (KeyError: 'job_id') on its
    host; one without an agent's PID and start counted live, so it was never swept."""
    folder, _ = state
    stray = folder / "junk.json"
    stray.write_text(content)
    dead = folder / f"j.n0.{_dead_pid()}.12345.json"  # a dead agent's, overwritten
    dead.write_text(content)
    assert recordfiles.live_records() == []
    assert stray.exists() and not dead.exists()  # a file not named as ours is left alone


@pytest.mark.parametrize("content", ["{}", "[]", '{"job_id": "j", "node_rank": 0, "agent'])
def test_a_live_agents_unreadable_record_still_shows_its_job(state, content: str) -> None:
    """A running job whose record was cut short (or overwritten): ``ps`` said "no jobs" and
    ``kill`` "still starting: it will not start", though it stopped the running job."""
    folder, _ = state
    me, start = os.getpid(), records.process_start_time(os.getpid())
    record = folder / f"j.n3.{me}.{start}.json"
    record.write_text(content)
    [job] = recordfiles.live_records()
    assert job == {
        "job_id": "j",
        "node_rank": 3,
        "agent_pid": me,
        "agent_start": start,
        "started_at": job["started_at"],
        "unreadable": str(record),
    }
    assert abs(job["started_at"] - (records.started_at(me) or 0)) < 1 and record.exists()


def test_a_record_removed_since_it_was_listed_is_no_job(state) -> None:
    """Its agent is finishing (it removes its record, then ends): taken for a live agent's
    unreadable record, it held the id against the other nodes of its own job starting on
    the same machine (exec true on 256 simulated hosts: 'node5: a job with this id is
    already running here (node 113 ...)')."""
    folder, _ = state
    me, start = os.getpid(), records.process_start_time(os.getpid())
    gone = folder / f"j.n3.{me}.{start}.json"  # listed, then removed before it was read
    assert recordfiles._sweep([str(gone)]) == []


def test_an_older_versions_rank_folder_goes_with_its_dead_agents_record(
    state, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """clusterlaunch before the claims had torchrun write to /tmp/clusterlaunch-ID-nK and
    removed it with a dead agent's record; after an upgrade nothing did. Only that exact
    folder of the record's own id and node, and never while an agent of them runs."""
    folder, _ = state
    monkeypatch.setattr(recordfiles, "OLD_RANK_FOLDER", str(tmp_path / "clusterlaunch-%s-n%d"))
    old, busy, today = (
        tmp_path / "clusterlaunch-old-n0",
        tmp_path / "clusterlaunch-busy-n0",
        tmp_path / "today",
    )
    for rank_folder in (old, busy, today):
        rank_folder.mkdir()
        (rank_folder / "0.log").write_text("rank output")
    pid = _dead_pid()
    for job_id, tail_dir in (("old", old), ("busy", busy), ("today", today)):
        name = f"{job_id}.n0.{pid}.12345.json"
        _write(folder, name, pid, 12345, str(tail_dir)).write_text(
            json.dumps({**json.loads((folder / name).read_text()), "job_id": job_id})
        )
    me, start = os.getpid(), records.process_start_time(os.getpid())
    (folder / f"busy.n0.{me}.{start}.json").write_text("{}")  # an agent of busy, node 0, runs
    recordfiles.clean_up_after_dead_agents()
    assert not old.exists() and busy.exists() and today.exists()
    assert sorted(os.listdir(folder)) == [f"busy.n0.{me}.{start}.json"]
