"""The shipped agent, run here with a slow or vanishing reader: what it drains, and when it stops.

Each test runs the real bundled agent program with a real job; this test
plays the controller on the agent's stdin/stdout pipes.
"""

from __future__ import annotations

import inspect
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.core.frames import FrameDecoder
from clusterlaunch.core.protocol import EVENT
from clusterlaunch.remote import program_source
from clusterlaunch.remote.tail import JobPipes, RankTail

MIB = 1 << 20
BIG = 24 * MIB  # three times the agent's 8 MiB output cap, hundreds of pipe buffers


class FakeController:
    """Stdin (heartbeats) and stdout (frames) of one agent."""

    def __init__(self, tmp_path: Path, job: str, *options: str) -> None:
        agent = tmp_path / "agent.py"
        agent.write_bytes(program_source("agent"))
        script = tmp_path / "job.py"
        script.write_text(JOB_HEADER + job)
        job_id = f"unit-drain-{uuid.uuid4().hex[:8]}"  # every agent claims its id here
        argv = [sys.executable, "-S", str(agent), "--job-id", job_id, "--node-rank", "0"]
        argv += ["--grace", "5", "--heartbeat-timeout", "15"]  # what the planner passes
        argv += options  # later options win
        argv += ["--", sys.executable, str(script), "--log-dir", "AUTO"]  # as torchrun's: AUTO
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.decoder = FrameDecoder()
        self._beating = threading.Event()

    def heartbeats(self) -> None:
        """Send ``h`` every 0.5 s until the agent's stdin closes (in a thread)."""

        def beat() -> None:
            assert self.process.stdin is not None
            try:
                while not self._beating.wait(0.5):
                    self.process.stdin.write(b"h")
                    self.process.stdin.flush()
            except (BrokenPipeError, ValueError):
                return

        threading.Thread(target=beat, daemon=True).start()

    def read_started(self) -> None:
        """Read until the agent's first frame, its ``started`` event."""
        assert self.process.stdout is not None
        while not self.decoder.feed(self.process.stdout.read1(4096)):
            pass

    def read_all(self) -> tuple[dict[bytes, bytes], list[dict[str, Any]], list[bytes]]:
        """Everything the agent sends: bytes per tag, events, and the tag order."""
        assert self.process.stdout is not None
        decoder = self.decoder
        data: dict[bytes, bytearray] = defaultdict(bytearray)
        events, order = [], []
        while chunk := self.process.stdout.read1(MIB):
            for frame in decoder.feed(chunk):
                order.append(frame.tag)
                if frame.tag == EVENT:
                    events.append(frame.event())
                else:
                    data[frame.tag] += frame.data
        assert decoder.leftover() == b""
        self.process.wait(timeout=30)
        self._beating.set()
        return {tag: bytes(value) for tag, value in data.items()}, events, order


def _wait_for_exit(pid_file: Path, timeout: float = 30) -> None:
    """Until the process whose PID the job wrote last has exited (gone, or a zombie)."""
    deadline = time.monotonic() + timeout
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the job never finished writing"
        time.sleep(0.01)
    stat = Path("/proc") / pid_file.read_text() / "stat"
    while time.monotonic() < deadline:
        try:
            if stat.read_bytes().rsplit(b") ", 1)[1][:1] == b"Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError("the job did not exit")


def pattern(label: str, size: int) -> bytes:
    """``size`` bytes of numbered lines, the last one without its newline."""
    lines = b"".join(b"%s %08d %s\n" % (label.encode(), i, b"z" * 80) for i in range(size // 100))
    return lines[: size - 5] + b"\xff\xfeEND"


# Jobs get the same pattern() (its source, not a huge argument).
JOB_HEADER = "import os, sys\n\n" + inspect.getsource(pattern) + "\n\n"


@pytest.mark.cluster  # 24 MiB through three processes: 1.4 s
def test_slow_reader_gets_every_byte_of_pipes_and_rank_files(tmp_path: Path) -> None:
    job = (  # torchrun's --log-dir (AUTO) becomes the folder of the agent's claim
        "base = sys.argv[2] + '/run_0/attempt_0'\n"
        f"open({str(tmp_path / 'tail')!r}, 'w').write(sys.argv[2])\n"
        f"for local, name, label in ((0, 'stdout.log', 'r4'), (1, 'stderr.log', 'r5')):\n"
        "    os.makedirs('%s/%d' % (base, local), exist_ok=True)\n"
        "    with open('%s/%d/%s' % (base, local, name), 'wb') as f:\n"
        f"        f.write(pattern(label, {12 * MIB}))\n"
        # Less than a pipe's buffer: the job does not wait for the agent to read it.
        "sys.stdout.buffer.write(pattern('out', 48000))\n"
        "sys.stderr.buffer.write(pattern('err', 48000))\n"
        f"open({str(tmp_path / 'job.pid')!r}, 'w').write(str(os.getpid()))\n"
    )
    controller = FakeController(tmp_path, job, "--rank-files", "--first-rank", "4")
    controller.heartbeats()
    # The job writes 24 MiB (three times the agent's output cap) and exits while
    # nobody reads. (The agent used to delete the rank files here, unread.)
    _wait_for_exit(tmp_path / "job.pid")
    data, events, order = controller.read_all()
    assert data[b"O"] == pattern("out", 48000)  # torchrun's (or the command's) own streams
    assert data[b"E"] == pattern("err", 48000)
    assert data[b"o4"] == pattern("r4", 12 * MIB)  # rank files written right before exiting
    assert data[b"e5"] == pattern("r5", 12 * MIB)
    assert [e["event"] for e in events] == ["started", "exit"]
    assert order[-1] == EVENT and events[-1]["code"] == 0  # the exit comes after all output
    assert controller.process.returncode == 0
    assert not Path((tmp_path / "tail").read_text()).exists()  # removed only once read


def test_stdin_eof_ends_the_drain(tmp_path: Path) -> None:
    controller = FakeController(tmp_path, f"sys.stdout.buffer.write(b'x' * {BIG})")
    controller.read_started()  # then nothing more is read
    assert controller.process.stdin is not None
    controller.process.stdin.close()  # the controller is gone, nobody will read
    # The job, blocked on its full pipe, is torn down (SIGTERM) and the agent leaves.
    assert controller.process.wait(timeout=20) == 143


@pytest.mark.cluster  # the agent's last 1 s of best-effort delivery
def test_heartbeat_silence_ends_the_drain(tmp_path: Path) -> None:
    job = f"sys.stdout.buffer.write(b'x' * {BIG})"
    controller = FakeController(tmp_path, job, "--heartbeat-timeout", "0.3")
    began = time.monotonic()
    controller.process.wait(timeout=30)  # no heartbeat, nothing read: gives up on its own
    assert time.monotonic() - began >= 0.3


def test_signal_handler_only_records_and_frames_stay_whole(tmp_path: Path) -> None:
    controller = FakeController(tmp_path, "import time; time.sleep(60)", "--grace", "1")
    controller.heartbeats()
    controller.read_started()
    for _ in range(3):  # a burst of signals while the loop runs
        controller.process.send_signal(signal.SIGUSR1)
    _, events, _ = controller.read_all()
    assert [e["event"] for e in events] == ["stopping", "exit"]
    assert events[0]["reason"] == "killed" and events[1]["reason"] == "killed"


# ------------------------------------------------------------------- the agent's readers, alone


def _rank_file(root: Path, local: int, name: str, data: bytes) -> Path:
    path = root / "run_0" / "attempt_0" / str(local) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _read_until_done(tail: RankTail) -> dict[bytes, bytes]:
    got: dict[bytes, bytes] = defaultdict(bytes)
    for _ in range(1000):
        if tail.done:
            return dict(got)
        for tag, data in tail.poll(4096):
            got[tag] += data
    raise AssertionError("RankTail never got done")


def test_frozen_tail_reads_to_the_size_it_had_and_no_further(tmp_path: Path) -> None:
    tail = RankTail(str(tmp_path), first_rank=8)
    assert not tail.done  # not frozen: more may come
    late = _rank_file(tmp_path, 1, "stderr.log", b"e" * 10_000)  # appears only now
    out = _rank_file(tmp_path, 0, "stdout.log", b"o" * 50_000)
    tail.freeze()
    with out.open("ab") as stray:
        stray.write(b"written after the end")  # a writer we could not stop
    assert _read_until_done(tail) == {b"o8": b"o" * 50_000, b"e9": b"e" * 10_000}
    late.unlink()
    tail.remove()
    assert not tmp_path.exists()


def test_frozen_tail_is_done_when_a_file_shrinks(tmp_path: Path) -> None:
    path = _rank_file(tmp_path, 0, "stdout.log", b"x" * 9000)
    tail = RankTail(str(tmp_path), first_rank=0)
    tail.freeze()
    path.write_bytes(b"short")  # truncated under us
    assert _read_until_done(tail) == {b"o0": b"short"}  # what is there, and then it stops


def test_job_pipes_end_at_eof_or_when_nobody_is_left_to_write() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.write(out_w, b"last words")
    os.close(out_w)  # ended: EOF after the data
    os.write(err_w, b"oops")  # err_w stays open: a stray holder
    pipes = JobPipes(os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    assert pipes.read(1024) == [(b"O", b"last words"), (b"E", b"oops")]
    assert pipes.read(1024) == [] and not pipes.closed  # stdout closed at EOF, stderr waits
    assert pipes.fds() == [err_r]
    assert pipes.read(1024, final=True) == [] and pipes.closed
    assert bytes(pipes.err_tail) == b"oops"
    os.close(err_w)


F_GETPIPE_SZ = 1032  # Linux's (fcntl names it from Python 3.10)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_job_pipes_hold_a_mebibyte_so_a_fast_job_blocks_less() -> None:
    import fcntl

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    assert fcntl.fcntl(out_w, F_GETPIPE_SZ) == 1 << 16  # Linux's default
    pipes = JobPipes(os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    assert [fcntl.fcntl(fd, F_GETPIPE_SZ) for fd in (out_w, err_w)] == [MIB, MIB]
    os.set_blocking(out_w, False)
    written = 0
    with pytest.raises(BlockingIOError):  # the job's writes block only once 1 MiB waits
        while True:
            written += os.write(out_w, b"x" * 65536)
    assert written == MIB
    os.close(out_w)
    os.close(err_w)
    read = b""
    while chunks := pipes.read(MIB, final=True):
        read += b"".join(data for _, data in chunks)
    assert read == b"x" * MIB


def test_a_pipe_linux_will_not_enlarge_keeps_its_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    from clusterlaunch.remote import tail

    def refuse(fd: int, command: int, arg: int = 0) -> int:
        raise PermissionError(1, "Operation not permitted")  # over pipe-user-pages-soft

    monkeypatch.setattr(fcntl, "fcntl", refuse)
    read_end, write_end = os.pipe()
    tail.enlarge_pipe(write_end, MIB)  # no error: the job runs with the pipe it has
    os.write(write_end, b"still works")
    assert os.read(read_end, 100) == b"still works"
    os.close(read_end)
    os.close(write_end)
