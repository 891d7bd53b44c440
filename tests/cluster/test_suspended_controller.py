"""A controller stopped (Ctrl-Z, SIGSTOP) before its job started: harmless when shorter than
``--heartbeat-timeout``, as docs/cli.md promises, in every phase.

The stops are longer than the keepalives' 6 s, so a silence of ours read as the hosts'
fails a healthy launch: the supervisor's own suspension watch, new when the job started,
missed one that began in the preflight ("host lost (no answer to keepalives)", 255), and
paramiko's handshake and login deadlines counted it ("no SSH handshake ... the server did
not answer", "Authentication timeout.", 2). Nor does a stop count toward a slow setup's
notice, nor an attempt it cut short among the server's handshake retries.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.support import PYTHON, start_cli, wait_running, write_hosts

pytestmark = [pytest.mark.cluster]

both_clients = pytest.mark.parametrize("client", ["paramiko", "openssh"])
SETUP = "sleep 4.5"  # told apart from any other sleep on the hosts
STOPPED_S = 9.0  # past the keepalives' 6 s, within the hosts' 15 s heartbeat timeout


def _stopped_for(process: subprocess.Popen[bytes], seconds: float) -> tuple[bytes, bytes]:
    """SIGSTOP ``process``, SIGCONT it ``seconds`` later; its output once it ended."""
    try:
        process.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        process.send_signal(signal.SIGCONT)
        return process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.torch
@both_clients
def test_a_stop_across_the_end_of_the_setups_is_not_a_lost_host(
    sim_cluster, tmp_path: Path, client: str
) -> None:
    setup = {"setup": SETUP}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    process = start_cli("run", sim_cluster, "--ssh-client", client, str(hosts), "allreduce.py")
    wait_running(sim_cluster, "node0", SETUP)
    wait_running(sim_cluster, "node1", SETUP)
    out, err = _stopped_for(process, STOPPED_S)  # the setups end meanwhile
    assert process.returncode == 0, err.decode()[-2000:]
    assert out.count(b"SUM=3") == 2, out.decode()
    assert b"host lost" not in err, err.decode()[-2000:]


FORWARD = """
server = socket.create_connection((host, port))


def up():
    while data := os.read(0, 65536):
        server.sendall(data)
    server.shutdown(socket.SHUT_WR)


threading.Thread(target=up, daemon=True).start()
while data := server.recv(65536):
    os.write(1, data)
"""
"""The relays' end: the ssh stream between stdin/stdout and the server, both ways."""

RELAY = (
    """
import os, socket, sys, threading, time

host, port, mark = sys.argv[1], int(sys.argv[2]), sys.argv[3]
open(mark, "w").close()
time.sleep(1)  # a slow way to the server: the handshake is waiting when the test stops us
"""
    + FORWARD
)


@both_clients
def test_a_stop_during_the_ssh_handshake_blames_no_server(
    sim_cluster, tmp_path: Path, client: str
) -> None:
    relay, mark = tmp_path / "relay.py", tmp_path / "dialled"
    relay.write_text(RELAY)
    config = tmp_path / "ssh_config"
    proxy = f"ProxyCommand {PYTHON} {relay} %h %p {mark}"
    text = Path(sim_cluster.ssh_config).read_text()
    config.write_text(text.replace("Host node0\n", f"Host node0\n    {proxy}\n", 1))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    argv = ("--ssh-client", client, "--ssh-config", str(config), "--connect-timeout", "3")
    process = start_cli("exec", None, *argv, str(hosts), "--", "echo", "hi")
    deadline = time.monotonic() + 30
    while not mark.exists():  # the relay runs: the controller waits for the server's banner
        assert time.monotonic() < deadline, "the ProxyCommand never ran"
        time.sleep(0.01)
    # Twice the connect timeout; for an OpenSSH master, past its own deadline (3 of them):
    # its ssh runs on and comes up meanwhile, which the first look after the stop sees.
    out, err = _stopped_for(process, 6.0 if client == "paramiko" else 12.0)
    assert process.returncode == 0, err.decode()[-2000:]
    assert out == b"[node0] hi\n", out.decode() + err.decode()


LONG_SETUP = "sleep 11.5"  # still running when the 9 s stop ends, done ~2.5 s before 5 s awake


@pytest.mark.parametrize(
    ("client", "command"),  # the preflight's read loop, and the supervisor's (exec's setups)
    [("paramiko", ["check"]), ("openssh", ["check"]), ("paramiko", ["exec", "--", "true"])],
)
def test_a_stop_does_not_count_toward_a_slow_setup(
    sim_cluster, tmp_path: Path, client: str, command: list[str]
) -> None:
    # It said "setup still running after 9 s" at once on resuming: 0 s of it seen awake.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": LONG_SETUP})])
    argv = ("--ssh-client", client, str(hosts), *command[1:])
    process = start_cli(command[0], sim_cluster, *argv)
    wait_running(sim_cluster, "node0", LONG_SETUP)
    out, err = _stopped_for(process, STOPPED_S)
    assert process.returncode == 0, err.decode()[-2000:]
    assert b"setup still running" not in out + err, err.decode()


HELD_RELAY = (
    """
import os, socket, sys, threading, time

host, port, marks, held = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
dial = len([name for name in os.listdir(marks) if name.startswith("dial")]) + 1
open(os.path.join(marks, f"dial{dial}"), "w").close()
deadline = time.monotonic() + 60  # the test lets it on, or it gives up
while dial <= held and not os.path.exists(os.path.join(marks, f"go{dial}")):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.01)
"""
    + FORWARD
)
STOPS = 4  # one more than the retries a server's failures get


def test_stops_during_handshakes_do_not_use_up_the_retries(sim_cluster, tmp_path: Path) -> None:
    # Each stop outlasts the connect timeout while the server's banner is held back: the
    # attempt fails on resuming, ours. They counted among the 3 retries: the 4th failed it.
    relay, marks = tmp_path / "relay.py", tmp_path / "marks"
    relay.write_text(HELD_RELAY)
    marks.mkdir()
    config = tmp_path / "ssh_config"
    proxy = f"ProxyCommand {PYTHON} {relay} %h %p {marks} {STOPS}"
    text = Path(sim_cluster.ssh_config).read_text()
    config.write_text(text.replace("Host node0\n", f"Host node0\n    {proxy}\n", 1))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    argv = ("--ssh-config", str(config), "--connect-timeout", "2", "--verbose")
    process = start_cli("exec", None, *argv, str(hosts), "--", "echo", "hi")
    try:
        for dial in range(1, STOPS + 1):
            deadline = time.monotonic() + 30
            while not (marks / f"dial{dial}").exists():
                assert time.monotonic() < deadline, f"no dial {dial}: {process.poll()}"
                time.sleep(0.01)
            process.send_signal(signal.SIGSTOP)
            time.sleep(3.0)  # past the connect timeout, and seen as a stop (over 2 s)
            process.send_signal(signal.SIGCONT)
            (marks / f"go{dial}").touch()
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err.decode()[-3000:]
    assert out == b"[node0] hi\n", out.decode() + err.decode()
    assert err.count(b"suspended for") == STOPS, err.decode()
