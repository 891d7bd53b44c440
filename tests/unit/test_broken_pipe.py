"""``clusterlaunch ... | head``: a reader that goes away stops the job cleanly (exit 141).

Real processes: clusterlaunch runs as a program with its stdout a pipe that the
test closes, on ``localhost`` (the local transport, no SSH needed).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHATTY = """\
import os, sys, time
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
for i in range(10**6):
    print(f"line {i}", flush=True)
    time.sleep(0.001)
"""


def _start(
    tmp_path: Path, *argv: str, stdout: int = subprocess.PIPE, unbuffered: str = ""
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": unbuffered}
    return subprocess.Popen(
        [sys.executable, "-m", "clusterlaunch", *argv],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _job_dir(tmp_path: Path, gpus: int) -> Path:
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  - {{host: localhost, gpus: {gpus}}}\n")
    (tmp_path / "chatty.py").write_text(CHATTY)
    (tmp_path / "pids").mkdir()
    return tmp_path / "pids"


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(
            ["run", "hosts.yaml", "chatty.py", "{pids}"], id="run", marks=pytest.mark.torch
        ),
        pytest.param(
            ["exec", "hosts.yaml", "--", sys.executable, "chatty.py", "{pids}"], id="exec"
        ),
    ],
)
@pytest.mark.cluster  # a real job, started and torn down by the CLI
def test_closed_stdout_stops_the_job_and_exits_141(tmp_path: Path, argv: list[str]) -> None:
    pids = _job_dir(tmp_path, gpus=2)
    proc = _start(tmp_path, *[word.replace("{pids}", str(pids)) for word in argv])
    assert proc.stdout is not None and proc.stderr is not None
    first = [proc.stdout.readline() for _ in range(2)]
    proc.stdout.close()  # what `| head -2` does after two lines
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=60)
    assert all(line.strip() for line in first), first
    assert code == 141, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert "job stopped: stdout was closed (broken pipe)" in err, err
    workers = [int(p.name) for p in pids.iterdir()]
    assert workers
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "the job was not torn down"


def test_a_reader_gone_before_the_first_byte_is_a_quiet_141(tmp_path: Path) -> None:
    """``--dry-run`` into a pipe already closed: no traceback, not even at interpreter exit."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  - {host: localhost, gpus: 2}\n")
    reader, writer = os.pipe()
    os.close(reader)  # gone before clusterlaunch even starts
    proc = _start(tmp_path, "run", "--dry-run", "hosts.yaml", "train.py", stdout=writer)
    os.close(writer)
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("json", [[], ["--json"]], ids=["text", "json"])
def test_a_reader_gone_mid_write_of_a_long_plan_is_141(
    tmp_path: Path, unbuffered: str, json: list[str]
) -> None:
    """``run --dry-run ... | head -1`` on 500 hosts: the plan is one write far larger than
    the pipe holds. Unbuffered (PYTHONUNBUFFERED, python -u), stdout is a raw file whose
    write returns a short count when the reader goes mid-write: that too is a stop."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  - host: n[1-500]\n    gpus: 1\n")
    argv = ["run", "--dry-run", *json, "hosts.yaml", "train.py"]
    proc = _start(tmp_path, *argv, unbuffered=unbuffered)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)  # the plan has begun: the rest waits on a full pipe
    proc.stdout.close()  # what `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


STUBBORN = """\
import os, signal, sys, time
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
def bye(*_):
    for i in range(3):
        print(f"cleaning {i}", flush=True)
        time.sleep(0.2)
    print("LAST WORDS", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
for i in range(10**6):
    print(f"tick {i}", flush=True)
    time.sleep(0.05)
"""


def _on_terminal(foreground: bool) -> Callable[[], None]:
    """The child's session: its own, with the pty as its terminal (``foreground``) or none,
    as under ``setsid`` (a closed terminal then sends no SIGHUP: writes fail with EIO)."""

    def session() -> None:
        os.setsid()
        if foreground:
            fcntl.ioctl(1, termios.TIOCSCTTY, 0)

    return session


@pytest.mark.parametrize("foreground", [True, False], ids=["sighup", "setsid"])
@pytest.mark.cluster  # a real job, started and torn down by the CLI
def test_a_closed_terminal_ends_the_job_as_a_hangup_and_loses_nothing(
    tmp_path: Path, foreground: bool
) -> None:
    """Closing the terminal: SIGHUP (or, under setsid, EIO on every write) stops the job
    with 129; the ranks' last words during the teardown still reach the log files."""
    pids = _job_dir(tmp_path, gpus=1)
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    master, terminal = os.openpty()
    argv = ["exec", "--log-dir", "logs", "hosts.yaml", "--", sys.executable, "stubborn.py"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "clusterlaunch", *argv, str(pids)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        stdout=terminal,
        stderr=terminal,
        preexec_fn=_on_terminal(foreground),  # safe here: the test runs no other thread
    )
    os.close(terminal)
    seen = b""
    while seen.count(b"tick") < 3:
        seen += os.read(master, 4096)
    os.close(master)  # the terminal window is closed
    assert proc.wait(timeout=60) == 129
    node_log = (tmp_path / "logs" / "node-0.log").read_text()
    assert node_log.endswith("cleaning 0\ncleaning 1\ncleaning 2\nLAST WORDS\n"), node_log[-200:]
    last = (tmp_path / "logs" / "controller.log").read_text().splitlines()[-1]
    why = "SIGHUP" if foreground else "stdout's terminal was closed (input/output error)"
    assert last.endswith(f"clusterlaunch: job stopped: {why}"), last
    assert not [int(p.name) for p in pids.iterdir() if _alive(int(p.name))]


FILL = """\
import os, sys
open(os.path.join(sys.argv[1], str(os.getpid())), "w").close()
for i in range(10**7):
    print(f"line {i} " + "x" * 60)
"""


def _mounted_tmpfs(where: Path) -> list[str]:
    """An argv prefix: the command sees a 256 KiB tmpfs at ``where`` (a mount namespace)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a tmpfs of our own needs root and unshare (util-linux)")
    script = 'mount -t tmpfs -o size=256k tmpfs "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, str(where)]


@pytest.mark.parametrize("full", ["stdout", "log-dir"])
@pytest.mark.cluster  # a real job, started and torn down by the CLI
def test_a_full_disk_stops_the_job_naming_the_file(tmp_path: Path, full: str) -> None:
    pids = _job_dir(tmp_path, gpus=1)
    (tmp_path / "fill.py").write_text(FILL)
    disk = tmp_path / "disk"
    disk.mkdir()
    argv = [sys.executable, "-m", "clusterlaunch", "exec"]
    argv += ["--log-dir", str(disk / "L")] if full == "log-dir" else []
    argv += ["hosts.yaml", "--", sys.executable, "fill.py", str(pids)]
    prefix = _mounted_tmpfs(disk) if full == "log-dir" else []
    with open("/dev/full" if full == "stdout" else os.devnull, "wb") as out:
        done = subprocess.run(
            [*prefix, *argv], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 1, err
    assert "Traceback" not in err, err
    where = "stdout:" if full == "stdout" else rf"{disk}/L/(node-0|controller)\.log \("
    assert re.search(rf"job stopped: cannot write {where} ?No space left on device", err), err
    assert not [int(p.name) for p in pids.iterdir() if _alive(int(p.name))]


@pytest.mark.parametrize(
    ("closing", "said"),
    [
        (">&-", "clusterlaunch: error: stdout closed (>&-); to discard output, redirect it: "
                ">/dev/null 2>&1\n"),
        ("2>&-", ""),  # nowhere to say it
        (">&- 2>&-", ""),
        ("<&-", None),  # stdin is not needed: the command runs
    ],
)  # fmt: skip
def test_a_closed_standard_stream_is_one_line_and_nothing_runs(
    tmp_path: Path, closing: str, said: str | None
) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    argv = [sys.executable, "-m", "clusterlaunch", "exec", "hosts.yaml", "--", "touch", "ran"]
    done = subprocess.run(
        ["sh", "-c", f'"$@" {closing}', "sh", *argv], cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, timeout=60,
    )  # fmt: skip
    if said is None:
        assert done.returncode == 0 and (tmp_path / "ran").exists(), done.stderr
        return
    assert done.returncode == 2
    assert done.stderr.decode() == said  # no traceback
    assert not (tmp_path / "ran").exists()
