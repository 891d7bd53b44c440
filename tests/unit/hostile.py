"""Support for the table of malformed inputs: a trap for connections, and the checks.

Every case runs the real entry point, ``clusterlaunch.cli.main``, against hosts
that resolve (through a real SSH config) to a TCP listener on 127.0.0.77: a
check that let a bad input through would dial it, and the listener records
that. Hosts named ``pxn*`` go through a ``ProxyCommand`` run by ``sh -c``
that leaves a file behind if it ever runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clusterlaunch.cli import parser as cliparser
from clusterlaunch.cli.main import main

TRAP_ADDR = "127.0.0.77"
MAX_SECONDS = 2.0
MAX_RSS_MB = 150  # above what the process had: a fresh interpreter with us is 43 MB
BASE_HOSTS = "hosts:\n  - {host: node0, gpus: 2}\n  - {host: node1, gpus: 2}\n"


@dataclass
class Trap:
    """A listener that accepts and records every connection, then hangs up.

    It answers with a banner of the wrong protocol version first: a bare hang-up
    looks like sshd's MaxStartups throttling, which the client retries with
    backoff (4.2 s for test_the_trap_is_real, against 0.3 s with the banner)."""

    port: int = 0
    dialed: list[tuple[str, int]] = field(default_factory=list)
    _sock: socket.socket | None = None

    def start(self) -> Trap:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind((TRAP_ADDR, 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, name="trap", daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return  # closed
            self.dialed.append(peer)
            with contextlib.suppress(OSError):
                conn.sendall(b"SSH-1.0-trap\r\n")
            conn.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()


@dataclass(frozen=True)
class Sandbox:
    """The directory a case runs in, with its hosts files, script and SSH config."""

    root: Path
    trap: Trap

    @property
    def marks(self) -> Path:
        return self.root / "marks"

    def fill(self, text: str) -> str:
        return text.replace("{dir}", str(self.root))


def make_sandbox(root: Path, trap: Trap) -> Sandbox:
    box = Sandbox(root, trap)
    box.marks.mkdir()
    (root / "ssh_config").write_text(
        "Host pxn*\n"
        # The wrong protocol version ends the handshake at once (paramiko notices a
        # proxy's EOF only when its timeout runs out: 2 s for test_the_trap_is_real).
        f'  ProxyCommand sh -c ": %h; touch {box.marks}/proxy-command-ran; echo SSH-1.0-trap"\n'
        # Two machines, as the job's hosts are (the same user, HostName and port would
        # be one host listed twice): the trap answers both.
        "Host node1\n  User trap-node1\n"
        "Host *\n"
        f"  HostName {TRAP_ADDR}\n  Port {trap.port}\n  ConnectTimeout 2\n"
    )
    (root / "nan_timeout_config").write_text("Host *\n  ConnectTimeout nan\n")
    (root / "word_port_config").write_text("Host *\n  Port abc\n")
    (root / "hosts.yaml").write_text(BASE_HOSTS)
    (root / "train.py").write_text("print('hi')\n")
    (root / "a-directory").mkdir()
    return box


@pytest.fixture(scope="module")
def trap() -> Iterator[Trap]:
    listener = Trap().start()
    yield listener
    listener.close()


@pytest.fixture(scope="module")
def shared_parser() -> argparse.ArgumentParser:
    """One parser per module: building it costs 3.4 ms, and the tables run main() 400 times."""
    return cliparser.build_parser()


@pytest.fixture(scope="module")
def shared_sandbox(tmp_path_factory: pytest.TempPathFactory, trap: Trap) -> Sandbox:
    """One sandbox per module: making one per case (a directory, eight files) cost more
    than the cases did. A case that dialed the trap or left a mark fails anyway."""
    return make_sandbox(tmp_path_factory.mktemp("hostile"), trap)


def _inside(
    box: Sandbox, parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Sandbox]:
    monkeypatch.chdir(box.root)
    monkeypatch.setattr(cliparser, "build_parser", lambda: parser)  # parsing leaves it as it is
    yield box


@pytest.fixture
def sandbox(
    shared_sandbox: Sandbox, shared_parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Sandbox]:
    """The module's sandbox as the working directory, for one case."""
    yield from _inside(shared_sandbox, shared_parser, monkeypatch)


@pytest.fixture
def fresh_sandbox(
    tmp_path: Path,
    trap: Trap,
    shared_parser: argparse.ArgumentParser,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Sandbox]:
    """A sandbox of the test's own (for a test that leaves marks on purpose)."""
    yield from _inside(make_sandbox(tmp_path, trap), shared_parser, monkeypatch)


def with_config(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--ssh-config ssh_config`` right after the command (not for sandbox)."""
    words = list(argv)
    if words and words[0] in ("run", "exec", "check", "ps", "kill") and "--ssh-config" not in words:
        return [words[0], "--ssh-config", "ssh_config", *words[1:]]
    return words


def assert_refused(
    box: Sandbox, argv: Sequence[str], capsys: pytest.CaptureFixture[str], fragment: str
) -> None:
    """Exit 2, one ``clusterlaunch: error:`` line containing ``fragment``, nothing dialed."""
    dialed_before = len(box.trap.dialed)
    started = time.process_time()  # CPU, not wall time: a busy machine must not fail this
    code = main(with_config(argv))
    seconds = time.process_time() - started
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert (code, out) == (2, ""), err
    assert len(lines) == 1 and lines[0].startswith("clusterlaunch: error: "), err
    assert fragment in lines[0], err
    assert len(box.trap.dialed) == dialed_before, f"a host was contacted: {err}"
    assert not list(box.marks.iterdir()), "a ProxyCommand (or an injected command) ran"
    assert seconds < MAX_SECONDS, f"{seconds:.2f} s of CPU"


@dataclass(frozen=True)
class Measured:
    code: int
    stderr: str
    stdout: str
    cpu_seconds: float
    added_rss_mb: float
    """How far the resident memory rose above what the process had when it began."""


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field_name + ":")))


def _measured_child(argv: Sequence[str], out: int, err: int, peak_path: Path) -> None:
    """In the forked child: run ``main`` on ``out``/``err``; never returns."""
    code = 70  # only if main() raised
    try:
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115  (pytest's capture is not ours)
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        # Not ru_maxrss, nor VmHWM alone: both start at the parent's (pytest's 240 MB),
        # which the child shares. What main() adds is the high-water mark's rise.
        baseline_kb = _status_kb("VmRSS")
        limit = (_status_kb("VmSize") << 10) + (2 << 30)  # a regression fails fast instead
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # of eating the machine
        code = main(with_config(argv))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        peak_path.write_text(str(_status_kb("VmHWM") - baseline_kb))
        os._exit(code)


def run_measured(box: Sandbox, argv: Sequence[str], timeout: float = 60) -> Measured:
    """Run the entry point in a child forked from here: its CPU time (wait4) and memory.

    A fork, not a new interpreter: the child starts with everything imported, so
    it measures the input's cost alone, and the table does not pay an interpreter
    start per case (0.4-1.6 s each, most of the unit tier's time).
    """
    out_path, err_path = box.root / "measured.out", box.root / "measured.err"
    peak_path = box.root / "measured.peak"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        pid = os.fork()
        if pid == 0:
            _measured_child(argv, out.fileno(), err.fileno(), peak_path)
    watchdog = threading.Timer(timeout, os.kill, (pid, signal.SIGKILL))
    watchdog.start()
    try:
        _, status, usage = os.wait4(pid, 0)
    finally:
        watchdog.cancel()
    return Measured(
        code=os.waitstatus_to_exitcode(status),
        stderr=err_path.read_text("utf-8", "replace"),
        stdout=out_path.read_text("utf-8", "replace"),
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        added_rss_mb=int(peak_path.read_text()) / 1024,
    )
