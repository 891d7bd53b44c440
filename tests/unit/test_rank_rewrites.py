"""A rank file rewritten behind the agent (the rank opened /dev/stdout or /dev/stderr):
read again from its start, without the NUL gap the rank's own descriptor leaves, and said.

Real files, written as a rank and its reopening write them: one descriptor of the rank's
(no O_APPEND, as torchrun's ``open(path, "w")``) and a second open with O_TRUNC.
"""

from __future__ import annotations

import json
from pathlib import Path

from clusterlaunch.core.protocol import EVENT
from clusterlaunch.core.rankrewrites import rewritten_text
from clusterlaunch.remote.rewrites import RewriteWatch
from clusterlaunch.remote.tail import RankTail
from clusterlaunch.testing.agentscript import FakeAgent, event, exits, started
from tests.unit.test_supervisor import supervise

ROOT = Path(__file__).resolve().parents[2]


def _rank_file(root: Path) -> Path:
    path = root / "job" / "run_0" / "attempt_0" / "0" / "stderr.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _poll_all(tail: RankTail) -> tuple[bytes, list[dict[str, object]]]:
    data, events = b"", []
    for _ in range(4):  # a rewrite found costs a poll of its own
        for tag, chunk in tail.poll(1 << 18):
            if tag == EVENT:
                events.append(json.loads(chunk))
            else:
                data += chunk
    return data, events


def _reopen_and_write(path: Path, text: bytes) -> None:
    """``echo text > /dev/stderr``: the same file opened again, emptied."""
    with path.open("wb", buffering=0) as again:
        again.write(text)


def test_a_shorter_rewrite_is_read_again_and_its_gap_left_out(tmp_path: Path) -> None:
    path = _rank_file(tmp_path)
    tail = RankTail(str(tmp_path / "job"), first_rank=3)
    with path.open("wb", buffering=0) as rank:
        rank.write(b"loading data\nstep 1 done\n")
        assert _poll_all(tail) == (b"loading data\nstep 1 done\n", [])
        _reopen_and_write(path, b"ERROR: shard\n")
        rank.write(b"giving up\n")  # at its old offset: 12 NULs before it
        assert b"\0" * 12 + b"giving up\n" in path.read_bytes()
        rewritten = {"event": "rewritten", "rank": 3, "stream": "stderr"}
        assert _poll_all(tail) == (b"ERROR: shard\ngiving up\n", [rewritten])
        rank.write(b"done\n")
        assert _poll_all(tail) == (b"done\n", [])  # said once
    tail.remove()


def test_a_rewrite_found_shorter_before_the_rank_writes_again(tmp_path: Path) -> None:
    path = _rank_file(tmp_path)
    tail = RankTail(str(tmp_path / "job"), first_rank=0)
    with path.open("wb", buffering=0) as rank:
        rank.write(b"rank 0: started, loading the data set\n")
        _poll_all(tail)
        _reopen_and_write(path, b"through /dev/stderr\n")
        assert _poll_all(tail)[0] == b"through /dev/stderr\n"
        rank.write(b"after\n")
        assert _poll_all(tail)[0] == b"after\n"
    tail.remove()


def test_a_file_rewritten_after_its_writers_are_gone_is_read_from_its_start(
    tmp_path: Path,
) -> None:
    path = _rank_file(tmp_path)
    tail = RankTail(str(tmp_path / "job"), first_rank=0)
    path.write_bytes(b"a long first line of output\n")
    _poll_all(tail)
    _reopen_and_write(path, b"last words\n")
    tail.freeze()
    assert _poll_all(tail)[0] == b"last words\n" and tail.done
    tail.remove()


def test_an_append_written_over_is_said_and_nothing_is_sent_twice(tmp_path: Path) -> None:
    """``echo x >> /dev/stderr``: not emptied; the rank's next write covers what it added."""
    path = _rank_file(tmp_path)
    tail = RankTail(str(tmp_path / "job"), first_rank=0)
    with path.open("wb", buffering=0) as rank:
        rank.write(b"first line\n")
        _poll_all(tail)
        with path.open("ab", buffering=0) as again:
            again.write(b"appended\n")
        assert _poll_all(tail) == (b"appended\n", [])
        rank.write(b"covers it\n")
        rank.write(b"next\n")
        rewritten = {"event": "rewritten", "rank": 0, "stream": "stderr"}
        # what of "covers it\n" lies past "appended\n" (its newline), then the next line:
        # cut, as the file is, but nothing sent twice
        assert _poll_all(tail) == (b"\nnext\n", [rewritten])
    tail.remove()


def test_nul_bytes_inside_a_line_pass_as_written() -> None:
    watch = RewriteWatch(0, "stdout")
    assert watch.pass_on(b"a\0b\0\0\n") == b"a\0b\0\0\n"
    assert watch.news() is None


def test_a_ranks_own_nuls_pass_as_written_until_the_file_is_found_rewritten() -> None:
    """Binary output is output: NULs at a line's start are not taken for a gap (nor said)
    until the file was found rewritten; from then on every NUL is the gap's."""
    watch = RewriteWatch(1, "stderr")
    assert watch.pass_on(b"line\n\0\0") == b"line\n\0\0"
    assert watch.pass_on(b"\0\0more\n") == b"\0\0more\n"
    assert watch.news() is None
    watch.restart()  # what the agent does once it found the file emptied
    assert watch.pass_on(b"ERROR\n\0\0\0giving up\n") == b"ERROR\ngiving up\n"
    assert watch.news() == {"event": "rewritten", "rank": 1, "stream": "stderr"}


def test_the_rewrite_is_said_with_the_rank_and_the_fix() -> None:
    said = event(event="rewritten", rank=3, stream="stderr")
    done = FakeAgent([started(), *exits(0)])
    run = supervise({"a": done, "b": FakeAgent([started(), said, *exits(0)])})
    line = (
        "clusterlaunch: b: rank 3 opened /dev/stderr for writing, which emptied the file its "
        "stderr passes through: lines of it not sent by then are lost, and the rest may be "
        "out of order; write to >&2 in a shell, sys.stderr in Python, not to /dev/stderr "
        "(docs/troubleshooting.md)\n"
    )
    assert line in run.err


def test_the_docs_quote_the_line_the_tool_prints() -> None:
    line = rewritten_text("node1", {"event": "rewritten", "rank": 1, "stream": "stderr"})
    troubleshooting = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert f"\nclusterlaunch: {line}\n" in troubleshooting
