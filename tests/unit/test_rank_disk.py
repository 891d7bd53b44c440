"""The disk under torchrun's per-rank files (remote/diskspace.py, remote/tail.py,
core/rankdisk.py): read bytes given back, a full folder said, and too little room refused.

The rank files were kept whole for the whole job; a host whose /tmp filled lost its ranks'
output and their errors, and the summary said a bare "exited with code 1". The cluster
tier runs the same over SSH on a small tmpfs (tests/cluster/test_rank_disk.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.core import defaults
from clusterlaunch.core.doctor import HostCheck, host_findings
from clusterlaunch.core.rankdisk import full_text, likely_cause, low_space, size_text
from clusterlaunch.core.reports import host_problems
from clusterlaunch.remote.diskspace import PUNCH_STEP
from clusterlaunch.remote.tail import RankTail
from clusterlaunch.testing.agentscript import FakeAgent, event, exits, root_cause, started
from tests.unit.test_supervisor import RUNNING, supervise

ROOT = Path(__file__).resolve().parents[2]
FOLDER = "/tmp/clusterlaunch-1000"
SPACE_FIX = (
    "free space in /tmp on that host (the folder is always in /tmp; TMPDIR does not move it)"
)


def _rank_file(root: Path, name: str = "stdout.log") -> Path:
    path = root / "job" / "run_0" / "attempt_0" / "0" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _read_all(tail: RankTail) -> bytes:
    got = b""
    while chunks := tail.poll(1 << 18):
        got += b"".join(data for _, data in chunks)
    return got


def test_what_the_agent_sent_leaves_the_disk_and_offsets_stay(tmp_path: Path) -> None:
    path = _rank_file(tmp_path)
    tail = RankTail(str(tmp_path / "job"), first_rank=0)
    with path.open("ab", buffering=0) as rank:
        rank.write(b"a" * (3 << 20) + b"b" * 1000)
        assert _read_all(tail) == b"a" * (3 << 20) + b"b" * 1000
        if not tail.puncher.works:
            pytest.skip(f"{tmp_path}'s file system punches no holes")
        held = path.stat().st_blocks * 512
        assert path.stat().st_size == (3 << 20) + 1000 and held < PUNCH_STEP + 4096
        rank.write(b"c" * 10)  # the writer goes on at its offset, the reader at its own
        assert _read_all(tail) == b"c" * 10
    tail.remove()


# A rank file in the folder named first on the command line, and a tail over it.
RANK_FILE = """
import sys, time
from pathlib import Path
from clusterlaunch.remote.tail import RankTail
root = Path(sys.argv[1])
path = root / "job" / "run_0" / "attempt_0" / "0" / "stdout.log"
path.parent.mkdir(parents=True)
path.touch()
tail = RankTail(str(root / "job"), 0)
"""


def test_where_holes_cannot_be_punched_every_byte_still_comes(tmp_path: Path) -> None:
    """ramfs has no hole punching (EOPNOTSUPP): the files stay whole, as before. Nor a size
    (0 of 0 blocks free): that is no full folder (no event among the bytes)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a ramfs of our own needs root and unshare (util-linux)")
    code = (
        RANK_FILE
        + """
path.write_bytes(b"x" * 3000000)
got = 0
while chunks := tail.poll(1 << 18):
    got += sum(len(data) for _, data in chunks)
print(got, tail.puncher.works, path.stat().st_size)
"""
    )
    assert _in_mounted(tmp_path, "ramfs", code) == "3000000 False 3000000"


def test_a_full_folder_is_said_once(tmp_path: Path) -> None:
    """A tmpfs that fills: the tail's next rescan carries the ``full`` event, once."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a tmpfs of our own needs root and unshare (util-linux)")
    code = (
        RANK_FILE
        + """
tags = lambda: [tag.decode() for tag, _ in tail.poll(1024)]
print(tags())  # room enough
try:
    (root / "fill").write_bytes(b"x" * (4 << 20))  # the tmpfs holds 2 MiB
except OSError:
    pass
for _ in range(200):  # until its next rescan (every 0.2 s)
    if said := tags():
        break
    time.sleep(0.02)
print(said)
tail.freeze(failed=True)  # a failed job looks again: said already
print(tags())
"""
    )
    said = _in_mounted(tmp_path, "tmpfs -o size=2m", code).splitlines()
    assert said == ["[]", "['J']", "[]"]


def _in_mounted(where: Path, mount: str, code: str) -> str:
    """``code``'s output, run where a fresh ``mount`` (type and options) is at ``where``."""
    script = f'mount -t {mount} none "$0" && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(where)]
    argv += [sys.executable, "-c", code, str(where)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_sizes_read_as_people_read_them() -> None:
    sizes = (0, 1023, 96 << 10, 1536 << 10, 64 << 20, 75 << 30)
    assert [size_text(n) for n in sizes] == [
        "0 bytes", "1023 bytes", "96 KiB", "1.5 MiB", "64 MiB", "75 GiB"
    ]  # fmt: skip


def test_the_preflight_refuses_too_little_room_for_the_rank_files() -> None:
    need = defaults.RANK_FILES_MIN_FREE
    assert host_problems({"rank_files": {"folder": FOLDER, "free": need}}) == []
    assert host_problems({"rank_files": {"folder": FOLDER, "free": 96 << 10}}) == [
        f"only 96 KiB free in {FOLDER}, where torchrun's per-rank files go (each rank's "
        f"output waits there until it is sent; {size_text(need)} wanted): {SPACE_FIX}"
    ]
    # A folder that cannot be written at all is said once, by the write check.
    cannot = {"scratch_problem": "cannot write in it", "rank_files": {"folder": FOLDER, "free": 0}}
    assert host_problems(cannot) == ["cannot write in it"]
    assert host_problems({"rank_files": {"folder": FOLDER, "free": None}}) == []  # no statvfs


def test_doctor_warns_of_too_little_room_for_the_rank_files() -> None:
    facts = {"rank_files": {"folder": FOLDER, "free": 2 << 20}}
    [found] = host_findings(HostCheck("node1", ("10.0.0.11",), facts))
    assert (found.level, found.where) == ("warning", "node1")
    assert found.text.startswith(f"only 2.0 MiB free in {FOLDER}, where torchrun's per-rank")
    assert found.text.endswith("free space in /tmp on node1 (the folder is always in /tmp; "
                               "TMPDIR does not move it)")  # fmt: skip
    roomy = {"rank_files": {"folder": FOLDER, "free": defaults.RANK_FILES_MIN_FREE}}
    assert host_findings(HostCheck("node1", ("10.0.0.11",), roomy)) == []


def test_a_full_folder_is_said_and_named_as_the_likely_cause() -> None:
    full = event(event="full", folder=FOLDER, free=0)
    failing = FakeAgent([started(), full, *exits(1, root_cause=root_cause(1, 1))])
    run = supervise({"a": RUNNING, "b": failing})
    said = (
        f"clusterlaunch: b: {FOLDER} is full (0 bytes free): what its ranks write from now on "
        "is lost, their errors too (no space left on device); free space in /tmp on b (the "
        "folder is always in /tmp; TMPDIR does not move it)\n"
    )
    assert said in run.err
    assert (run.outcome.exit_code, run.outcome.reason) == (
        1,
        f"rank 3 on b exited with code 1; likely cause: {FOLDER} on b was full (no space left "
        "on device), so the ranks' output there, the error included, was lost",
    )


def test_a_failure_on_hosts_with_room_names_no_disk() -> None:
    failing = FakeAgent([started(), *exits(1, root_cause=root_cause(1, 1))])
    run = supervise({"a": RUNNING, "b": failing})
    assert run.outcome.reason == "rank 3 on b exited with code 1"
    assert "full" not in run.err


def test_the_docs_quote_the_lines_the_tool_prints() -> None:
    full = {"event": "full", "folder": FOLDER, "free": 0}
    failed = "job failed: rank 1 on node1 exited with code 1" + likely_cause([("node1", full)])
    low = low_space({"folder": FOLDER, "free": 96 << 10})
    troubleshooting = (ROOT / "docs" / "troubleshooting.md").read_text()
    for line in (full_text("node1", full), failed):
        assert f"\nclusterlaunch: {line}\n" in troubleshooting, line
    assert f"cpu   ok            {low}\n" in troubleshooting
    cli = " ".join((ROOT / "docs" / "cli.md").read_text().split())  # quoted across lines
    assert f"`{failed}`" in cli and f"`clusterlaunch: {full_text('node1', full)[:150]}" in cli
