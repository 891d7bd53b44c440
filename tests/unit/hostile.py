"""Support for the table of malformed inputs: a trap for connections, and the checks.

Every case runs the real entry point, ``clusterlaunch.cli.main``, against hosts
that resolve (through a real SSH config) to a TCP listener on 127.0.0.77: a
check that let a bad input through would dial it, and the listener records
that. Hosts named ``pxn*`` go through a ``ProxyCommand`` run by ``sh -c``
that leaves a file behind if it ever runs.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main

TRAP_ADDR = "127.0.0.77"
MAX_SECONDS = 2.0
MAX_RSS_MB = 200
BASE_HOSTS = "hosts:\n  - {host: node0, gpus: 2}\n  - {host: node1, gpus: 2}\n"


@dataclass
class Trap:
    """A listener that accepts and records every connection, then hangs up."""

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


@pytest.fixture
def sandbox(tmp_path: Path, trap: Trap, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    monkeypatch.chdir(tmp_path)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield make_sandbox(tmp_path, trap)
    for signum, handler in saved.items():  # main() installs its own
        signal.signal(signum, handler)


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
    started = time.monotonic()
    code = main(with_config(argv))
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert (code, out) == (2, ""), err
    assert len(lines) == 1 and lines[0].startswith("clusterlaunch: error: "), err
    assert fragment in lines[0], err
    assert len(box.trap.dialed) == dialed_before, f"a host was contacted: {err}"
    assert not list(box.marks.iterdir()), "a ProxyCommand (or an injected command) ran"
    assert seconds < MAX_SECONDS, f"{seconds:.2f} s"


# Runs clusterlaunch's __main__ and, at exit, writes the peak resident memory of this
# process image (VmHWM). Not ru_maxrss: Linux carries the high-water mark across fork
# and exec, so a child of pytest reported pytest's own 242 MB whatever it did itself.
_MEASURED_MAIN = """
import atexit, runpy, sys
path = sys.argv.pop(1)
def peak():
    with open("/proc/self/status") as status:
        kb = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(path, "w") as out:
        out.write(kb)
atexit.register(peak)
sys.argv[0] = "clusterlaunch"
runpy.run_module("clusterlaunch", run_name="__main__")
"""


@dataclass(frozen=True)
class Measured:
    code: int
    stderr: str
    stdout: str
    cpu_seconds: float
    peak_rss_mb: float


def run_measured(box: Sandbox, argv: Sequence[str], timeout: float = 60) -> Measured:
    """Run clusterlaunch in a process of its own; its CPU time (wait4) and peak memory."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}

    def bound_memory() -> None:  # a regression fails fast instead of eating the machine
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    out_path, err_path = box.root / "measured.out", box.root / "measured.err"
    peak_path = box.root / "measured.peak"
    command = [sys.executable, "-c", _MEASURED_MAIN, str(peak_path), *with_config(argv)]
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            command,
            cwd=box.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=bound_memory,
        )
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return Measured(
        code=proc.returncode,
        stderr=err_path.read_text("utf-8", "replace"),
        stdout=out_path.read_text("utf-8", "replace"),
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        peak_rss_mb=int(peak_path.read_text()) / 1024,
    )
