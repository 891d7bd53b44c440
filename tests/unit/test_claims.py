"""One job of an id per user and host (``remote/claims.py``): atomic, released, never stale.

Real processes and links; the state directory is a temporary one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clusterlaunch.remote import claims, recordfiles, records
from tests.unit.test_records import _dead_pid

RACERS = 24
CLAIM_AND_WAIT = """
import os, sys
from clusterlaunch.remote import claims, recordfiles, records
records.state_dirs = lambda: [sys.argv[1]]
claims.state_dirs = recordfiles.state_dirs = records.state_dirs
os.read(0, 1)  # all start together
claim, holder = claims.Claim.take("same", 0)
print("won" if claim else "refused", flush=True)
os.read(0, 1)  # hold it until the test has counted
"""


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(records, "state_dirs", lambda: [str(folder)])
    monkeypatch.setattr(claims, "state_dirs", records.state_dirs)
    monkeypatch.setattr(recordfiles, "state_dirs", records.state_dirs)
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    return folder


def test_of_many_agents_started_at_once_exactly_one_holds_the_id(state: Path) -> None:
    """Asking first (ps's way) let two of five ``exec --job-id`` started together run."""
    env = {**os.environ, "PYTHONPATH": str(Path(claims.__file__).parents[2])}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM_AND_WAIT, str(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in range(RACERS)
    ]
    try:
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write(b"g")
            racer.stdin.flush()
        said = [racer.stdout.readline().strip() for racer in racers if racer.stdout]
    finally:
        for racer in racers:
            racer.communicate(b"e", timeout=30)
    assert sorted(said) == [b"refused"] * (RACERS - 1) + [b"won"]


def test_a_held_id_is_refused_with_its_holder_then_free_once_released(state: Path) -> None:
    claim, holder = claims.Claim.take("j", 0)
    assert claim is not None and holder is None
    other, holder = claims.Claim.take("j", 0, let_go_s=0)
    assert other is None and holder == {"pid": os.getpid(), "node": 0}
    assert claims.holder_of("j", 0) == holder
    tail = Path(claim.make_tail_dir())
    (tail / "0.log").write_text("rank output")
    assert oct(tail.stat().st_mode & 0o777) == "0o700"
    claim.remove()
    assert not tail.exists() and os.listdir(state) == []
    again, holder = claims.Claim.take("j", 0)
    assert again is not None and holder is None
    again.remove()


def test_another_place_on_the_machine_is_another_host(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated hosts share one machine: their sshd's address tells them apart."""
    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 50000 127.0.0.11 22")
    node0, _ = claims.Claim.take("j", 0)
    monkeypatch.setenv("SSH_CONNECTION", "127.0.0.1 50001 127.0.0.12 22")
    node1, _ = claims.Claim.take("j", 1)
    again, holder = claims.Claim.take("j", 0, let_go_s=0)  # another job, through node1's sshd
    assert node0 is not None and node1 is not None and again is None
    assert holder == {"pid": os.getpid(), "node": 1}
    described = sorted(c["ssh_server"] for c in claims.live_claims())
    assert described == ["127.0.0.11 22", "127.0.0.12 22"]
    node0.remove()
    node1.remove()


def test_a_holder_that_lets_go_at_once_is_waited_for(state: Path) -> None:
    """A restart's dropped layout: its agents end on their channel's close as the next
    layout's agents start on the same hosts, and took their claims for a clash."""
    env = {**os.environ, "PYTHONPATH": str(Path(claims.__file__).parents[2])}
    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_WAIT, str(state)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.write(b"g")
    holder.stdin.flush()
    assert holder.stdout.readline().strip() == b"won"
    threading.Timer(0.5, lambda: holder.communicate(b"e", timeout=30)).start()
    claim, held_by = claims.Claim.take("same", 0)
    assert claim is not None and held_by is None
    claim.remove()


@pytest.mark.parametrize("target", ["\u00b2.12345.0", "1.\u0661\u0662.0", "x.y", ""])
def test_a_link_that_names_no_agent_is_no_claim_and_no_traceback(state: Path, target: str) -> None:
    """Planted in the folder (or left by something else): ``int("²")`` raised ValueError."""
    (state / "j@n0.claim").symlink_to(target) if target else (state / "j@n0.claim").mkdir()
    claim, holder = claims.Claim.take("k", 0)
    assert claim is not None and holder is None
    assert [found["job_id"] for found in claims.live_claims()] == ["k"]
    claim.remove()


def test_a_live_agents_unreadable_record_names_no_place_and_holds_no_id(state: Path) -> None:
    """Cut short, it says nothing of the sshd it came through: no telling it is this place's."""
    with subprocess.Popen(["sleep", "30"]) as other:  # another live agent, no claim seen
        try:
            (state / f"j.n3.{other.pid}.{_start(other)}.json").write_text('{"job_id": "j", "no')
            claim, holder = claims.Claim.take("j", 0, let_go_s=0)
            assert claim is not None and holder is None
            claim.remove()
        finally:
            other.kill()


def test_a_dead_agents_claim_blocks_nothing_and_its_files_go(state: Path) -> None:
    """A SIGKILLed agent could not release its claim (nor remove its files)."""
    pid = _dead_pid()
    (state / "j@n0.claim").symlink_to(f"{pid}.12345.0")
    (state / "j@n0").mkdir()
    (state / "j@n0" / "0.log").write_text("left behind")
    (state / "k@n0.claim").symlink_to(f"{pid}.12345.0")
    (state / "k@n0").mkdir()
    claim, holder = claims.Claim.take("j", 0)  # the next job of the id takes it over
    assert claim is not None and holder is None and not (state / "j@n0").exists()
    assert claims.live_claims() == [
        {
            "job_id": "j",
            "node_rank": 0,
            "agent_pid": os.getpid(),
            "agent_start": records.process_start_time(os.getpid()),
            "ssh_server": "",
        }
    ]
    assert sorted(os.listdir(state)) == [".claims.lock", "j@n0.claim"]  # k's went too
    claim.remove()


def test_what_is_in_a_claims_way_is_no_claim(state: Path) -> None:
    (state / "j@n0.claim").mkdir()  # not a link: nobody's claim
    claim, holder = claims.Claim.take("j", 0)
    assert claim is not None and holder is None
    claim.remove()


@pytest.fixture
def runtime_and_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A host with ``/run/user/UID`` (a tmpfs in RAM): the state dirs are it, then /tmp's."""
    runtime, tmp = tmp_path / "run-user-clusterlaunch", tmp_path / "tmp-clusterlaunch"
    for folder in (runtime, tmp):
        folder.mkdir(mode=0o700)
    monkeypatch.setattr(records, "state_dirs", lambda: [str(runtime), str(tmp)])
    monkeypatch.setattr(claims, "state_dirs", records.state_dirs)
    monkeypatch.setattr(recordfiles, "state_dirs", records.state_dirs)
    monkeypatch.delenv("SSH_CONNECTION", raising=False)
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    return runtime, tmp


def test_rank_files_are_in_tmp_not_next_to_the_claim_in_ram(
    runtime_and_tmp: tuple[Path, Path],
) -> None:
    """Every byte every rank writes, for the whole job: in /run/user/UID (systemd caps it
    at 10% of RAM) a chatty job filled it and its ranks' writes failed (ENOSPC)."""
    runtime, tmp = runtime_and_tmp
    claim, _ = claims.Claim.take("j", 0)
    assert claim is not None
    tail = Path(claim.make_tail_dir())
    assert tail == tmp / "j@n0" and oct(tail.stat().st_mode & 0o777) == "0o700"
    assert os.listdir(runtime) == ["j@n0.claim"]  # the claim stays in the state dir
    (tail / "0.log").write_text("rank output")
    claim.remove()
    assert os.listdir(runtime) == [] and os.listdir(tmp) == []


def test_a_dead_holders_rank_files_in_tmp_are_swept_with_its_claim(
    runtime_and_tmp: tuple[Path, Path],
) -> None:
    runtime, tmp = runtime_and_tmp
    (runtime / "j@n0.claim").symlink_to(f"{_dead_pid()}.12345.0")
    (tmp / "j@n0").mkdir()
    (tmp / "j@n0" / "0.log").write_text("left behind")
    assert claims.live_claims() == []
    assert not (tmp / "j@n0").exists() and not (runtime / "j@n0.claim").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a folder another user's")
def test_rank_files_in_a_folder_another_user_made_are_not_touched(
    runtime_and_tmp: tuple[Path, Path],
) -> None:
    """/tmp is everyone's: a /tmp/clusterlaunch-UID someone else made holds nothing of ours
    (the preflight refuses it), and a dead claim's sweep removes nothing from it."""
    runtime, tmp = runtime_and_tmp
    (tmp / "j@n0").mkdir()
    (tmp / "j@n0" / "theirs").write_text("not ours")
    os.chown(tmp, 65534, 65534)
    (runtime / "j@n0.claim").symlink_to(f"{_dead_pid()}.12345.0")
    assert claims.live_claims() == []
    assert (tmp / "j@n0" / "theirs").exists() and not (runtime / "j@n0.claim").exists()


HOLD = """
import os, sys
from clusterlaunch.remote import claims, recordfiles, records
records.state_dirs = lambda: sys.argv[1:]
claims.state_dirs = recordfiles.state_dirs = records.state_dirs
claim, holder = claims.Claim.take("j", 0)
claim.make_tail_dir()
print("held", flush=True)
os.read(0, 1)  # hold it until the test is done
"""


def _holding(env_dirs: list[Path]) -> subprocess.Popen[bytes]:
    """A live agent (a process of its own) holding job ``j`` with these state dirs."""
    env = {**os.environ, "PYTHONPATH": str(Path(claims.__file__).parents[2])}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, *map(str, env_dirs)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
    return holder


def test_a_claim_in_the_other_state_dir_holds_the_id(runtime_and_tmp: tuple[Path, Path]) -> None:
    """/run/user/UID appeared (a login, linger) while a job of the id ran with its claim in
    /tmp: the first folder is another now, and a second job of the id ran, after removing
    the first one's rank files (both name them alike)."""
    runtime, tmp = runtime_and_tmp
    holder = _holding([tmp])  # before /run/user/UID was there
    try:
        (tmp / "j@n0" / "0.log").write_text("rank 0's output, not sent yet")
        claim, held_by = claims.Claim.take("j", 0, let_go_s=0)
        assert claim is None and held_by == {"pid": holder.pid, "node": 0}
        assert claims.holder_of("j", 0) == held_by  # what `check` reports
        assert (tmp / "j@n0" / "0.log").exists() and os.listdir(runtime) == []
        (runtime / "j@n0.claim").symlink_to(f"{_dead_pid()}.12345.0")  # a dead namesake's
        assert claims.live_claims()[0]["agent_pid"] == holder.pid
        assert (tmp / "j@n0" / "0.log").exists() and os.listdir(runtime) == [".claims.lock"]
    finally:
        holder.communicate(b"e", timeout=30)


def _record(folder: Path, job_id: str, pid: int, **fields: object) -> Path:
    start = records.process_start_time(pid)
    path = folder / f"{job_id}.n0.{pid}.{start}.json"
    record = {"job_id": job_id, "node_rank": 0, "agent_pid": pid, "agent_start": start}
    path.write_text(json.dumps({**record, "started_at": 1.5, "command": ["x"], **fields}))
    return path


def test_a_running_job_of_a_version_without_claims_holds_the_id(state: Path) -> None:
    """An upgrade while a job runs: it has a record and no claim, and ``run`` of its id
    started a second job (``ps`` listed both, ``kill`` ended both)."""
    with subprocess.Popen(["sleep", "60"]) as older_agent:
        try:
            _record(state, "j", older_agent.pid, ssh_server="")
            claim, held_by = claims.Claim.take("j", 0, let_go_s=0)
            assert claim is None and held_by == {"pid": older_agent.pid, "node": 0}
            assert os.listdir(state) == [f"j.n0.{older_agent.pid}.{_start(older_agent)}.json"]
        finally:
            older_agent.kill()


def test_a_record_whose_agent_holds_a_claim_elsewhere_is_that_places(state: Path) -> None:
    """Agents of one job on one machine at two places (a Slurm step's nodes, say): the other
    place's record is no clash here, whatever its sshd address says."""
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            _record(state, "j", other.pid)
            (state / "j@n1.claim").symlink_to(f"{other.pid}.{_start(other)}.1")
            claim, held_by = claims.Claim.take("j", 0, let_go_s=0)
            assert claim is not None and held_by is None
            claim.remove()
        finally:
            other.kill()


def _start(process: subprocess.Popen[bytes]) -> int | None:
    return records.process_start_time(process.pid)
