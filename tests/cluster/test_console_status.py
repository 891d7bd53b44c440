"""The first run looks right: a live status line on a terminal, torchrun's banner folded.

The controller runs with stderr on a real pseudo-terminal (Python's ``pty``),
in a tmux window (what the screen finally shows, ``capture-pane -e``), and, for
comparison, on a pipe; the hosts are simulated sshd hosts running a
real torchrun, two processes each, so every host prints the OMP_NUM_THREADS banner.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from clusterlaunch.controller.status import ERASE
from tests.cluster.support import REPO, _env, cli_argv, rank_lines, run_cli_bytes, write_hosts

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

NOTE = (
    b"clusterlaunch: torchrun set OMP_NUM_THREADS=1 for each process on "
    b"2 of 2 host(s) (its banner, folded; set OMP_NUM_THREADS to choose)"
)


def run_on_a_terminal(
    argv: list[str], timeout: float = 120, cwd: Path = REPO, **env: str
) -> tuple[int, bytes, bytes]:
    """``argv`` with stderr on a pseudo-terminal and stdout on a pipe: (status, stdout, stderr);
    ``env``: variables set for it."""
    terminal, tty_end = pty.openpty()
    read_out, write_out = os.pipe()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**_env(), **env},
        stdin=subprocess.DEVNULL,
        stdout=write_out,
        stderr=tty_end,
    )
    os.close(tty_end)
    os.close(write_out)
    captured = {terminal: b"", read_out: b""}
    open_fds = [terminal, read_out]
    while open_fds:
        ready, _, _ = select.select(open_fds, [], [], timeout)
        assert ready, f"no output for {timeout} s"
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the terminal's last writer has gone
                data = b""
            if data:
                captured[fd] += data
            else:
                open_fds.remove(fd)
                os.close(fd)
    return process.wait(timeout=timeout), captured[read_out], captured[terminal]


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    return write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 2)])


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_a_terminal_sees_live_progress_then_the_header(sim_cluster, hosts: Path, client) -> None:
    argv = cli_argv(
        "run", sim_cluster, "--ssh-client", client, str(hosts), "examples/hello_ranks.py"
    )
    status, out, err = run_on_a_terminal(argv)
    assert status == 0, err
    assert len(rank_lines(out.decode())) == 4
    # Rewritten in place (erase, text, no newline) through every phase, the hosts
    # counted as each connects (1/2 is a live count: 2/2 alone could be a mark_all)...
    assert ERASE + b"clusterlaunch: connected 1/2 \xc2\xb7 preflight 0/2" in err
    assert ERASE + b"clusterlaunch: connected 2/2 \xc2\xb7 preflight 0/2" in err
    assert b"preflight 2/2 \xc2\xb7 started 0/2" in err
    head, _, rest = err.partition(ERASE + b"clusterlaunch: job cl-")
    # ...then replaced by the header naming the master address, and drawn no more.
    assert b"host(s), world size 4, master 127.0.0.11:" in rest.split(b"\r\n")[0]
    assert ERASE not in rest and b"\r\n" not in head
    assert b"Setting OMP_NUM_THREADS" not in err and err.count(NOTE) == 1


def test_a_dumb_terminal_gets_no_status_line_and_no_escape_codes(sim_cluster, hosts: Path) -> None:
    """Emacs' shell (TERM=dumb) showed the line's \\r and ESC [K as they were."""
    argv = cli_argv("run", sim_cluster, str(hosts), "examples/hello_ranks.py")
    status, out, err = run_on_a_terminal(argv, TERM="dumb")
    assert status == 0, err
    assert len(rank_lines(out.decode())) == 4
    assert b"\x1b[" not in err and b"connected " not in err
    assert err.startswith(b"clusterlaunch: job cl-") and b"master 127.0.0.11:" in err


def test_with_sync_the_line_counts_the_copies(sim_cluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("hello_ranks.py", "_dist.py"):
        (project / name).write_bytes((REPO / "examples" / name).read_bytes())
    dests = {f"node{i}": tmp_path / f"dest{i}" for i in range(2)}
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [(h, 1, {"workdir": str(d)}) for h, d in dests.items()]
    )
    argv = cli_argv("run", sim_cluster, "--sync", str(hosts), "hello_ranks.py")
    status, out, err = run_on_a_terminal(argv, cwd=project)
    assert status == 0, err
    assert len(rank_lines(out.decode())) == 2
    assert b"connected 2/2 \xc2\xb7 synced 0/2" in err  # the copies, counted as they end...
    assert b"synced 2/2 \xc2\xb7 preflight 0/2" in err
    assert err.count(b"clusterlaunch: sync node") == 2  # ...each copy's report above the line
    assert all((dest / "hello_ranks.py").exists() for dest in dests.values())


def test_piped_there_is_no_status_and_the_log_keeps_the_banners(
    sim_cluster, hosts: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    result = run_cli_bytes(
        "run", sim_cluster, "--log-dir", str(logs), str(hosts), "examples/hello_ranks.py", cwd=REPO
    )
    assert result.returncode == 0, result.stderr
    assert b"\x1b[" not in result.stderr and b"\r" not in result.stderr
    lines = result.stderr.decode().splitlines()
    assert lines[0].startswith("clusterlaunch: job cl-") and "master 127.0.0.11:" in lines[0]
    assert result.stderr.count(NOTE) == 1 and b"OMP_NUM_THREADS environment" not in result.stderr
    log = (logs / "controller.log").read_text()
    assert log.count("Setting OMP_NUM_THREADS environment variable") == 2  # nothing lost


SGR = re.compile(rb"\x1b\[[0-9;]*m")


def screen_after(
    argv: list[str], socket_name: str, timeout: float = 180, width: int = 200
) -> tuple[str, bytes]:
    """Run ``argv`` in a detached tmux window ``width`` columns wide (stdout and stderr
    both the terminal), then what the user sees: the pane as text, and as
    ``capture-pane -e`` gives it."""
    tmux = ["tmux", "-L", socket_name, "-f", "/dev/null"]
    command = f"{shlex.join(argv)}; echo __exit=$?; exec sleep 600"
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", "50", "-c", str(REPO), command],
        env=_env(),
        check=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            shown = subprocess.run(
                [*tmux, "capture-pane", "-p", "-e", "-J"], capture_output=True, check=True
            ).stdout
            if b"__exit=" in shown or time.monotonic() > deadline:
                return SGR.sub(b"", shown).decode(), shown
            time.sleep(0.5)
    finally:  # our own server, on our own socket: nothing else is touched
        subprocess.run([*tmux, "kill-server"], check=False)


@pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux (test-programs.sh installs it)")
def test_in_tmux_the_screen_shows_the_header_then_the_ranks(
    sim_cluster, hosts: Path, tmp_path: Path
) -> None:
    """What a user's terminal finally shows: no status line left over, the header first."""
    argv = cli_argv("run", sim_cluster, str(hosts), "examples/hello_ranks.py")
    text, raw = screen_after(argv, f"cl-test-{os.getpid()}-{tmp_path.name}")
    lines = [line for line in text.splitlines() if line.strip()]
    assert "__exit=0" in lines, text
    assert lines[0].startswith("clusterlaunch: job cl-"), text
    assert "master 127.0.0.11:" in lines[0], text
    assert not [line for line in lines if "preflight" in line or "connected" in line], text
    assert len(rank_lines("\n".join(lines))) == 4, text
    assert sum("OMP_NUM_THREADS" in line for line in lines) == 1, text  # the folded note
    assert b"\x1b[" in raw  # colored prefixes: it really was a terminal


@pytest.mark.skipif(not shutil.which("tmux"), reason="no tmux (test-programs.sh installs it)")
def test_in_a_narrow_tmux_window_no_status_line_is_left_over(
    sim_cluster, hosts: Path, tmp_path: Path
) -> None:
    """40 columns: the status line (74 with two hosts) is cut to fit, so each redraw erases
    the last; a wrapped one left a row behind at every redraw."""
    argv = cli_argv("run", sim_cluster, str(hosts), "examples/hello_ranks.py")
    text, _ = screen_after(argv, f"cl-narrow-{os.getpid()}-{tmp_path.name}", width=40)
    assert "__exit=0" in text, text
    left = [line for line in text.splitlines() if "connected" in line or "preflight" in line]
    assert not left, text
