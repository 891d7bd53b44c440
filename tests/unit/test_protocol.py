"""One wire protocol: written by the shipped programs, read by the controller's FrameDecoder."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusterlaunch.controller.jobs import jobctl_records
from clusterlaunch.controller.preflight import run_preflight
from clusterlaunch.core import protocol
from clusterlaunch.core.frames import Frame, FrameDecoder, FrameError
from clusterlaunch.core.protocol import (
    EVENT,
    JOB_STDERR,
    JOB_STDOUT,
    MAX_HEADER,
    NOISE,
    SYNC,
    encode_frame,
    parse_header,
    rank_tag,
    to_json,
)
from clusterlaunch.remote import BUNDLES, program_source
from clusterlaunch.remote.wire import Output
from clusterlaunch.transport.local import LocalConnection, LocalProcess
from tests.unit.plans import two_local_hosts

NOISE_TEXT = b"Welcome to gpu1!\nJ 12\n{not a frame}\nno newline at the end"


def bundled(name: str) -> dict[str, Any]:
    """The top-level names of remote program ``name`` exactly as it is shipped."""
    namespace: dict[str, Any] = {"__name__": "bundled"}
    exec(compile(program_source(name), f"clusterlaunch-{name}", "exec"), namespace)
    return namespace


def agent_stream(output_class: Callable[..., Any]) -> bytes:
    """Noise from the shell, then what the agent's Output writes, read back from a pipe."""
    read_end, write_end = os.pipe()
    os.write(write_end, NOISE_TEXT)
    out = output_class(fd=write_end)
    out.start()
    out.frame(rank_tag(False, 3), b"half a line\r")
    out.frame(rank_tag(True, 12), b"\x00\xffbinary\n")
    out.frame(JOB_STDOUT, b"torchrun says hi\n")
    out.frame(JOB_STDERR, b"E 5\nnot a header, just bytes\n")
    out.event(event="exit", reason="exited", code=0, message="caf\u00e9")
    out.flush()
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        return stream.read()


EXPECTED = [
    Frame(NOISE, NOISE_TEXT),
    Frame(b"o3", b"half a line\r"),
    Frame(b"e12", b"\x00\xffbinary\n"),
    Frame(JOB_STDOUT, b"torchrun says hi\n"),
    Frame(JOB_STDERR, b"E 5\nnot a header, just bytes\n"),
]


def decode(pieces: list[bytes]) -> list[Frame]:
    """Frames of a stream fed in ``pieces``, with consecutive noise joined."""
    decoder = FrameDecoder()
    frames = [frame for piece in pieces for frame in decoder.feed(piece)] + decoder.finish()
    joined: list[Frame] = []
    for frame in frames:
        if joined and frame.tag == NOISE and joined[-1].tag == NOISE:
            joined[-1] = Frame(NOISE, joined[-1].data + frame.data)
        else:
            joined.append(frame)
    return joined


@pytest.mark.parametrize("source", ["module", "bundle"])
def test_what_the_agent_writes_the_decoder_reads_split_anywhere(source: str) -> None:
    output_class = Output if source == "module" else bundled("agent")["Output"]
    stream = agent_stream(output_class)
    for cut in range(len(stream) + 1):  # every split point: mid-marker, mid-header, mid-payload
        frames = decode([stream[:cut], stream[cut:]])
        assert frames[:-1] == EXPECTED, cut
        assert frames[-1].tag == EVENT
        assert frames[-1].event() == {
            "event": "exit",
            "reason": "exited",
            "code": 0,
            "message": "caf\u00e9",
        }
    assert decode([bytes([b]) for b in stream]) == decode([stream])  # byte by byte


def test_a_slow_reader_gets_every_frame_whole_and_in_order() -> None:
    """The queue is written in pieces as the pipe takes them: writes end mid-frame,
    span frames, and more frames are queued while others are half written."""
    read_end, write_end = os.pipe()
    out = Output(fd=write_end)
    out.start()
    sent = [
        (rank_tag(index % 2 == 1, index), bytes([index]) * ((index + 1) * 9_001))
        for index in range(40)
    ]
    received = bytearray()
    most_queued = 0
    for tag, data in sent:
        out.frame(tag, data)
        out.flush()  # the pipe (64 KiB) fills: the rest stays queued
        most_queued = max(most_queued, out.unsent)
        received += os.read(read_end, 50_000)  # the reader takes less than was written
    assert most_queued > 1 << 20  # frames waited, half written, behind others
    while out.unsent:
        out.flush()
        received += os.read(read_end, 50_000)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as rest:
        received += rest.read()
    assert decode([bytes(received)]) == [Frame(tag, data) for tag, data in sent]
    assert not out.queue and out.head_sent == 0


def test_a_frame_split_across_reads_waits_for_its_end() -> None:
    decoder = FrameDecoder()
    frame = encode_frame(b"o0", b"0123456789")
    assert decoder.feed(SYNC + frame[:7]) == []  # the header and 3 payload bytes
    assert decoder.feed(frame[7:12]) == []
    assert decoder.feed(frame[12:] + encode_frame(EVENT, b"{}")) == [
        Frame(b"o0", b"0123456789"),
        Frame(EVENT, b"{}"),
    ]


def test_bytes_after_the_marker_that_are_no_frame_are_an_error() -> None:
    with pytest.raises(FrameError, match="bad frame header"):
        FrameDecoder().feed(SYNC + b"hello world\n")
    with pytest.raises(FrameError, match="bad frame header"):
        FrameDecoder().feed(SYNC + b"x" * MAX_HEADER)


def test_header_encoding_and_parsing_agree() -> None:
    for tag, data in ((b"o7", b"abc"), (EVENT, b""), (JOB_STDERR, b"\n" * 100)):
        frame = encode_frame(tag, data)
        header, _, payload = frame.partition(b"\n")
        assert parse_header(header) == (tag, len(data))
        assert payload == data
    for bad in (b"", b"O", b"O x", b" 5", b"O -1", b"O 5 6"):
        assert parse_header(bad) is None, bad


@pytest.mark.parametrize(
    "module", sorted({m for modules in BUNDLES.values() for m in modules if "/" in m})
)
def test_core_modules_in_bundles_run_on_python_3_8(module: str) -> None:
    """No ``from __future__`` (a bundle is one file), no 3.9+ annotations, stdlib only."""
    path = Path(__file__).parents[2] / "clusterlaunch" / f"{module}.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module != "__future__", f"{module}: from __future__"
            assert not (node.module or "").startswith("clusterlaunch"), ast.unparse(node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            assert node.value.id not in ("tuple", "list", "dict", "set", "type"), ast.unparse(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            assert not isinstance(node.left, ast.Name), f"{module}: X | Y: {ast.unparse(node)}"


def run_program(name: str, args: list[str], tmp_path: Path) -> bytes:
    """A bundled program run the way a host runs it, after a chatty login script."""
    program = tmp_path / f"{name}.py"
    program.write_bytes(program_source(name))
    script = f"printf 'motd: hello\\n'; exec {sys.executable} {program} \"$@\""
    done = subprocess.run(
        ["sh", "-c", script, "sh", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_the_probe_reports_its_stages_as_event_frames(tmp_path: Path) -> None:
    frames = decode([run_program("probe", ["--script", "nope.py", "--timeout", "5"], tmp_path)])
    assert frames[0] == Frame(NOISE, b"motd: hello\n")
    events = [json.loads(frame.data) for frame in frames[1:]]
    assert all(frame.tag == EVENT for frame in frames[1:])
    assert [event["stage"] for event in events] == ["static", "end"]
    assert events[0]["script_found"] is False
    assert events[0]["executable"] == sys.executable


def test_jobctl_answers_with_event_frames_ending_with_end(tmp_path: Path) -> None:
    out = run_program("jobctl", ["list"], tmp_path)
    assert out.startswith(b"motd: hello\n" + SYNC)
    records = jobctl_records(out)
    assert records[-1] == {"event": "end"}
    assert all(record["event"] == "job" for record in records[:-1])  # other jobs on this machine


def test_jobctl_records_cut_short_or_garbled_have_no_end() -> None:
    end = encode_frame(EVENT, b'{"event": "end"}')
    job = encode_frame(EVENT, b'{"event": "job", "job_id": "j"}')
    assert jobctl_records(b"noise" + SYNC + job + end) == [
        {"event": "job", "job_id": "j"},
        {"event": "end"},
    ]
    assert jobctl_records(SYNC + job + end[:-3]) == [{"event": "job", "job_id": "j"}]
    assert jobctl_records(SYNC + b"@@jobctl@@ {}\n" + end) == []
    assert jobctl_records(b'@@jobctl@@ {"event": "end"}\n') == []  # no marker: all noise


class ChattyConnection(LocalConnection):
    """A host whose login script prints things that look like frames (or old report lines)."""

    CHATTER = 'J 9\\n@@probe@@ {"stage": "end"}\\nO 99999\\n'  # printf's format

    def start(self, command: str, stdin: bytes = b"") -> LocalProcess:
        return super().start(f"printf '{self.CHATTER}'; {command}", stdin)


def test_a_chatty_login_script_before_the_probe_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    noise: dict[int, bytes] = {}  # per decoder, so per host
    feed = FrameDecoder.feed

    def spy(self: FrameDecoder, data: bytes) -> list[Frame]:
        frames = feed(self, data)
        said = b"".join(frame.data for frame in frames if frame.tag == NOISE)
        noise[id(self)] = noise.get(id(self), b"") + said
        return frames

    monkeypatch.setattr(FrameDecoder, "feed", spy)
    connections = {"a": ChattyConnection(), "b": ChattyConnection()}
    plan = two_local_hosts("j-protocol", str(tmp_path), "echo setup output goes to stderr")
    result = run_preflight(plan, connections, None, need_torch=False, timeout=30)  # type: ignore[arg-type]
    assert result.problems == []
    assert [report.connected for report in result.reports] == [True, True]
    assert result.master_port is not None
    assert sorted(noise.values()) == [b'J 9\n@@probe@@ {"stage": "end"}\nO 99999\n'] * 2


class GarbledProcess:
    """A probe whose stdout breaks the protocol after the marker."""

    def __init__(self) -> None:
        self.pending = [SYNC + b"this is not a frame header at all\n"]

    def waitables(self) -> list[int]:
        return []

    def read(self) -> tuple[bytes, bytes]:
        return (self.pending.pop() if self.pending else b""), b""

    def send(self, data: bytes) -> bool:
        return True

    def close_stdin(self) -> None:
        pass

    def exit_status(self) -> int | None:
        return 0

    def finished(self) -> bool:
        return False  # still running: only the garbled stream ends the wait

    def close(self) -> None:
        pass


class GarblingConnection(LocalConnection):
    def start(self, command: str, stdin: bytes = b"") -> GarbledProcess:  # type: ignore[override]
        return GarbledProcess()


def test_a_garbled_probe_is_a_host_problem_not_a_crash(tmp_path: Path) -> None:
    connections = {"a": LocalConnection(), "b": GarblingConnection()}
    result = run_preflight(
        two_local_hosts("j-protocol", str(tmp_path)),
        connections,  # type: ignore[arg-type]
        None,
        need_torch=False,
        timeout=30,
    )
    [problem] = result.problems
    assert problem.host == "b"
    assert problem.detail.startswith("garbled probe output (bad frame header: b'this is not")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(JSON_VALUES)
def test_to_json_writes_what_json_dumps_writes(value: object) -> None:
    assert to_json(value) == json.dumps(value, sort_keys=True)


@pytest.mark.parametrize("encoder", ["C", "json itself"])
def test_to_json_with_hostile_values_and_errors(
    encoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if encoder != "C":
        monkeypatch.setattr(protocol, "_json", None)  # an interpreter without _json
    value = {
        "z": ['\0\n"\\\u2028\ud800é', float("nan"), -float("inf"), 1e300],
        "a": (1, None, True),
    }
    assert to_json(value) == json.dumps(value, sort_keys=True)
    loop: list[object] = []
    loop.append(loop)
    for bad, error in (
        ({"x": object()}, TypeError),
        (loop, ValueError),
        ({1: 2, "1": 3}, TypeError),
    ):
        with pytest.raises(error) as ours:
            to_json(bad)
        with pytest.raises(error) as theirs:
            json.dumps(bad, sort_keys=True)
        assert str(ours.value) == str(theirs.value)
