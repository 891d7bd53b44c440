"""`clusterlaunch run/exec` against real sshd hosts and real torchrun gloo jobs.

Every test here starts real processes; after each one the fixtures assert
that nothing is left running on any simulated host.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterlaunch.core.defaults import CONNECT_TIMEOUT_S, PREFLIGHT_TIMEOUT_S
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.limits import MAX_ARG_BYTES, MAX_EXEC_BYTES
from clusterlaunch.remote import records
from tests.cluster.support import (
    PYTHON,
    WORKERS,
    rank_lines,
    run_cli,
    start_cli,
    wait_for_lines,
    write_hosts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.torch]

# The core cases run over both SSH clients (--ssh-client); each must leave nothing behind.
both_clients = pytest.mark.parametrize("client", ["paramiko", "openssh"])
STRICT = ("--host-key-policy", "strict")
ACCEPT = ("--host-key-policy", "accept-new")


@both_clients
def test_two_hosts_two_processes_all_reduce(sim_cluster, tmp_path: Path, client: str) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 2)])
    result = run_cli("run", sim_cluster, "--ssh-client", client, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert sorted(rank for rank, *_ in lines) == [0, 1, 2, 3]
    for rank, host, local, text in lines:
        # The prefix's rank is the rank the worker itself reports.
        assert f"RANK={rank} LOCAL_RANK={local} " in text
        assert host == ("node0" if rank < 2 else "node1")
        assert "WORLD_SIZE=4" in text and "SUM=10" in text  # 1+2+3+4


def test_heterogeneous_ranks_match_the_plan(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 3), ("node1", 1)])
    dry = run_cli("run", sim_cluster, "--dry-run", "--json", str(hosts), "allreduce.py")
    plan = json.loads(dry.stdout)
    expected = {
        rank: (node["host"], node["nproc"])
        for node in plan["nodes"]
        for rank in node["global_ranks"]
    }
    assert expected == {0: ("node0", 3), 1: ("node0", 3), 2: ("node0", 3), 3: ("node1", 1)}
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    seen = {}
    for rank, host, _, text in rank_lines(result.stdout):
        seen[rank] = (host, int(text.split("LOCAL_WORLD_SIZE=")[1].split()[0]))
    assert seen == expected


HOSTILE = [
    "two words",
    "it's",
    '"double"',
    "$(touch /tmp/clusterlaunch-pwned)",
    "`id`",
    "a;b",
    "x && y || z",
    "new\nline",
    "tab\there",
    "*",
    "~",
    "back\\slash",
    "--dry-run",
    "-x",
    "",
    "naïve 日本 ☃",
]


def test_hostile_arguments_reach_the_script_exactly(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py", *HOSTILE)
    assert result.returncode == 0, result.stderr
    lines = rank_lines(result.stdout)
    assert len(lines) == 2
    for *_, text in lines:
        assert json.loads(text.split("ARGV=", 1)[1]) == HOSTILE
    assert not Path("/tmp/clusterlaunch-pwned").exists()


def test_a_home_relative_python_runs_the_job(sim_cluster, tmp_path: Path) -> None:
    """``python: ~/...`` is the host's home, for the agent and torchrun alike."""
    # The hosts' user is this one: its home holds the test interpreter at this path.
    python = "~/" + os.path.relpath(PYTHON, Path.home())
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"python": python}), ("node1", 1)])
    dry = run_cli("run", sim_cluster, "--dry-run", str(hosts), "allreduce.py")
    assert "~/" + shlex.quote(python[2:]) + " -m torch.distributed.run" in dry.stdout
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    assert sorted(rank for rank, *_ in rank_lines(result.stdout)) == [0, 1]


@both_clients
def test_failing_rank_exit_code_and_summary(sim_cluster, tmp_path: Path, client: str) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2)])
    result = run_cli(
        "run",
        sim_cluster,
        "--ssh-client",
        client,
        "--env",
        "FAIL_RANK=2",
        "--env",
        "FAIL_CODE=7",
        str(hosts),
        "allreduce.py",
    )
    assert result.returncode == 7, result.stderr
    assert "job failed: rank 2 on node1 exited with code 7" in result.stderr
    assert "RANK=2 " in result.stderr.split("last ")[-1]  # the rank's own last lines


@pytest.mark.parametrize(
    ("signum", "expected"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGKILL, -signal.SIGKILL)],
)
@both_clients
def test_signals_to_the_controller_leave_nothing(
    sim_cluster, tmp_path: Path, assert_no_orphans, signum: int, expected: int, client: str
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    argv = ("--ssh-client", client, "--grace", "2", str(hosts), "sleeper.py")
    process = start_cli("run", sim_cluster, *argv)
    try:
        wait_for_lines(process, b" up", 2, timeout=90)
        process.send_signal(signum)
        assert process.wait(timeout=30) == expected
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # SIGKILL: only the agents' stdin EOF can clean up; grace 2 s + 2 s.
    assert_no_orphans(sim_cluster, timeout=4.0)


def test_timeout_ends_the_job_with_124(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("run", sim_cluster, "--timeout", "8", str(hosts), "sleeper.py")
    assert result.returncode == 124, result.stderr
    assert "--timeout 8 s reached" in result.stderr


@both_clients
def test_host_lost_mid_job(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans, client: str
) -> None:
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    argv = ("--ssh-client", client, "--grace", "2", str(hosts), "sleeper.py")
    process = start_cli("run", cluster, *argv)
    try:
        wait_for_lines(process, b" up", 3, timeout=90)
        cluster.kill_host("node1")  # its sshd and everything started through it
        assert process.wait(timeout=30) == 255
        assert process.stderr is not None
        assert "host node1 was lost" in process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_no_orphans(cluster, timeout=4.0)


@both_clients
def test_unreachable_host_starts_nothing_anywhere(sim_cluster, tmp_path: Path, client: str) -> None:
    marker = tmp_path / "started"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1), ("node1", 1), ("127.0.0.250", 1, {"port": 9})],  # nothing listens there
    )
    result = run_cli(
        "run",
        sim_cluster,
        "--ssh-client",
        client,
        "--env",
        f"MARKER_FILE={marker}",
        str(hosts),
        "touch_marker.py",
    )
    assert result.returncode == 2
    assert "nothing was started" in result.stderr
    assert "127.0.0.250" in result.stderr and "refused" in result.stderr
    assert not list(tmp_path.glob("started*"))


@both_clients
def test_changed_host_key_is_refused_and_starts_nothing(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(2)
    marker = tmp_path / "started"
    known = Path(cluster.known_hosts)
    lines = known.read_text().splitlines()
    other_key = lines[0].split()[1:]  # node0's key claimed for node1
    lines[1] = " ".join([lines[1].split()[0], *other_key])
    known.write_text("\n".join(lines) + "\n")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli(
        "run",
        cluster,
        "--ssh-client",
        client,
        "--env",
        f"MARKER_FILE={marker}",
        str(hosts),
        "touch_marker.py",
    )
    assert result.returncode == 2
    assert "HOST KEY CHANGED" in result.stderr and "node1" in result.stderr
    assert not list(tmp_path.glob("started*"))


@both_clients
def test_unknown_host_key_strict_refuses_accept_new_records(
    sim_cluster_factory, tmp_path: Path, client: str
) -> None:
    cluster = sim_cluster_factory(1)
    known = Path(cluster.known_hosts)
    original = known.read_text()
    known.write_text("")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    # The sim ssh_config says StrictHostKeyChecking yes: that is the default policy.
    by_config = run_cli("exec", cluster, "--ssh-client", client, str(hosts), "--", "true")
    assert by_config.returncode == 2 and "unknown host key" in by_config.stderr
    strict = run_cli("exec", cluster, "--ssh-client", client, *STRICT, str(hosts), "--", "true")
    assert strict.returncode == 2 and "unknown host key" in strict.stderr
    assert known.read_text() == ""
    accept = run_cli("exec", cluster, "--ssh-client", client, *ACCEPT, str(hosts), "--", "true")
    assert accept.returncode == 0, accept.stderr
    assert known.read_text().split() == original.split()  # the same key, recorded
    again = run_cli("exec", cluster, "--ssh-client", client, *STRICT, str(hosts), "--", "true")
    assert again.returncode == 0, again.stderr


def test_every_line_exactly_once_in_rank_order(sim_cluster, tmp_path: Path) -> None:
    per_rank = 250_000
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 2)])
    result = run_cli("run", sim_cluster, str(hosts), "spam.py", str(per_rank), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    counters = {rank: 0 for rank in range(4)}
    for rank, _, _, text in rank_lines(result.stdout):
        assert text == f"r{rank} {counters[rank]:06d}"
        counters[rank] += 1
    assert counters == {rank: per_rank for rank in range(4)}


def test_progress_bars_partial_lines_and_utf8_survive(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("run", sim_cluster, str(hosts), "oddities.py")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for rank, host in ((0, "node0"), (1, "node1")):
        prefix = f"[r{rank} {host}:0] "
        bar = f"{prefix}bar{rank} 10%\r{prefix}bar{rank} 50%\r{prefix}bar{rank} 100%\n"
        assert bar in out  # \r kept, with the prefix repeated after it
        assert f"{prefix}half{rank}-done\n" in out  # never split
        assert f"{prefix}snow \u2603 \u65e5\u672c\n" in out
        assert f"{prefix}no newline at the end\n" in out
        assert f"{prefix}stderr of {rank}\n" in result.stderr


@both_clients
def test_exec_streams_each_host_and_returns_the_exit_code(
    sim_cluster, tmp_path: Path, client: str
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    script = (
        'echo "out $CLUSTERLAUNCH_SIM_HOST"; echo err >&2; '
        '[ "${CLUSTERLAUNCH_SIM_HOST#*-}" = node1 ] && exit 3; exit 0'
    )
    result = run_cli(
        "exec", sim_cluster, "--ssh-client", client, str(hosts), "--", "sh", "-c", script
    )
    assert result.returncode == 3, result.stderr
    for host in ("node0", "node1"):
        assert any(
            line.startswith(f"[{host}]") and line.endswith(f"-{host}")
            for line in result.stdout.splitlines()
        )
        assert f"[{host}] err" in result.stderr.replace("  ", " ").replace("  ", " ")
    # Without --fail-fast every host runs to its end; the summary names the failures.
    assert "job failed: 1 of 2 host(s) failed: node1 (3)" in result.stderr


@both_clients
def test_the_longest_words_a_host_takes(sim_cluster, tmp_path: Path, client: str) -> None:
    """One word of MAX_ARG_BYTES, and words of MAX_EXEC_BYTES in all, run over either
    client; one byte more is refused in one line, before any host is contacted.

    The command goes on stdin (for_login_shell); the host's exec still takes 131,071
    bytes a word ("env: Argument list too long" at 131,072) and ARG_MAX in all. Before,
    the whole command was one argument: 131,071 bytes of it, and a few MB reset
    paramiko's connection.
    """
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])

    def exec_with(words: list[str]) -> subprocess.CompletedProcess[str]:
        script = 'n=0; for a; do n=$((n + ${#a})); done; echo "ok $n"'
        argv = ["--ssh-client", client, str(hosts), "--", "sh", "-c", script, "sh", *words]
        return run_cli("exec", sim_cluster, *argv)

    def refused(result: subprocess.CompletedProcess[str]) -> str:
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        return result.stderr

    fits = exec_with(["a" * MAX_ARG_BYTES])
    assert fits.stdout.count(f"ok {MAX_ARG_BYTES}") == 2, fits.stderr
    # One byte more: through the hosts file, as this machine starts no program with it.
    big = {"env": {"BIG": "a" * (MAX_ARG_BYTES + 1 - len("BIG="))}}
    write_hosts(hosts, [("node0", 1, big), ("node1", 1)])
    assert "BIG=... (name and value) is 131,072 bytes" in refused(exec_with([]))
    write_hosts(hosts, [("node0", 1), ("node1", 1)])
    piece = "a" * 100_000
    found = re.search(r"take ([0-9,]+) bytes", refused(exec_with([piece] * 11)))
    assert found is not None
    others = int(found[1].replace(",", "")) - 11 * (100_000 + 9)  # each: NUL and pointer
    last = "a" * (MAX_EXEC_BYTES - others - 10 * (100_000 + 9) - 9)
    fits = exec_with([piece] * 10 + [last])
    assert fits.stdout.count(f"ok {1_000_000 + len(last)}") == 2, fits.stderr
    assert f"take {MAX_EXEC_BYTES + 1:,} bytes" in refused(exec_with([piece] * 10 + [last + "a"]))


def test_exec_of_a_missing_command_exits_127(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("exec", sim_cluster, str(hosts), "--", "/nonexistent/cmd")
    assert result.returncode == ExitStatus.NOT_STARTED == 127, result.stderr  # as a shell says
    assert "node0: cannot start /nonexistent/cmd" in result.stderr
    summary = result.stderr.split("job failed: 2 of 2 host(s) failed: ", 1)[1].splitlines()[0]
    assert sorted(summary.split(", ")) == ["node0 (127)", "node1 (127)"]  # in the order they ended


def test_ranks_filter_and_log_dir(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 2), ("node1", 1)])
    logs = tmp_path / "logs"
    result = run_cli(
        "run", sim_cluster, "--ranks", "1-2", "--log-dir", str(logs), str(hosts), "allreduce.py"
    )
    assert result.returncode == 0, result.stderr
    assert sorted(rank for rank, *_ in rank_lines(result.stdout)) == [1, 2]
    assert sorted(p.name for p in logs.iterdir()) == [
        "controller.log",
        "rank-0.log",
        "rank-1.log",
        "rank-2.log",
    ]
    for rank in range(3):
        assert f"RANK={rank} " in (logs / f"rank-{rank}.log").read_text()


def test_localhost_runs_without_ssh(tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("localhost", 2)])
    result = run_cli("run", None, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    assert sorted(rank for rank, *_ in rank_lines(result.stdout)) == [0, 1]
    assert "SUM=3" in result.stdout


def test_workers_directory_is_the_remote_workdir() -> None:
    # The tests above rely on the default workdir: the controller's directory.
    assert (WORKERS / "allreduce.py").is_file()


def test_preflight_reports_every_problem_and_starts_nothing(sim_cluster, tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 0\n")  # a stand-in: one GPU, index 0
    smi.chmod(0o755)
    marker = tmp_path / "started"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1),
            ("node1", 2, {"setup": f"export PATH={fake_bin}:$PATH"}),
            ("node2", 1, {"workdir": "/nonexistent/dir"}),
        ],
    )
    result = run_cli(
        "run", sim_cluster, "--env", f"MARKER_FILE={marker}", str(hosts), "touch_marker.py"
    )
    assert result.returncode == 2
    assert "nothing was started" in result.stderr
    assert "needs device(s) [0, 1] but nvidia-smi lists [0]" in result.stderr
    assert "/nonexistent/dir" in result.stderr
    assert not list(tmp_path.glob("started*"))


def test_check_prints_the_table(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("check", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    assert "2.13.0" in result.stdout
    assert result.stdout.count(" ok") >= 4  # master reachable + status, per host


def test_master_port_in_use_fails_preflight(sim_cluster, tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
        started = time.monotonic()
        result = run_cli("run", sim_cluster, "--master-port", str(port), str(hosts), "allreduce.py")
        took = time.monotonic() - started
    assert result.returncode == 2
    assert f"cannot bind port {port}" in result.stderr
    # Said at once, not after the 60 s preflight timeout (node 1 waited for a
    # connection check that could not happen: measured 60.4 s, now ~2 s).
    assert took < PREFLIGHT_TIMEOUT_S / 2, f"{took:.1f} s"


@both_clients
def test_proxy_jump(sim_cluster_factory, tmp_path: Path, client: str) -> None:
    cluster = sim_cluster_factory(2)
    config = tmp_path / "ssh_config"
    text = Path(cluster.ssh_config).read_text()
    config.write_text(text.replace("Host node1\n", "Host node1\n    ProxyJump node0\n"))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1)])
    args = (
        "--ssh-client",
        client,
        "--ssh-config",
        str(config),
        str(hosts),
        "--",
        "sh",
        "-c",
        "echo $CLUSTERLAUNCH_SIM_HOST",
    )
    result = run_cli("exec", None, *args)
    assert result.returncode == 0, result.stderr
    assert "-node1" in result.stdout
    # On loopback every connection comes from 127.0.0.1, so prove the route by
    # dependency: without node0's sshd, node1 cannot be reached any more.
    cluster.kill_host("node0")
    again = run_cli("exec", None, *args)
    assert again.returncode == 2
    assert "127.0.0.11" in again.stderr and "nothing was started" in again.stderr


def test_second_interrupt_kills_at_once(sim_cluster, tmp_path: Path, assert_no_orphans) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    # Workers ignore SIGTERM, so a graceful teardown would wait the whole grace.
    process = start_cli("run", sim_cluster, "--grace", "60", str(hosts), "stubborn.py")
    try:
        wait_for_lines(process, b" up", 2, timeout=90)
        process.send_signal(signal.SIGINT)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=2)  # still waiting on the stubborn workers
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 130
        assert process.stderr is not None
        assert "second interrupt: killing everything now" in process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_no_orphans(sim_cluster, timeout=3.0)


def test_torch_missing_or_different_fails_preflight(sim_cluster, tmp_path: Path) -> None:
    # A torch package first on node1's path, as a PYTHONPATH to another build makes
    # one: the version is the one `import torch` would load (its version.py).
    fake_site = tmp_path / "site"
    (fake_site / "torch").mkdir(parents=True)
    (fake_site / "torch" / "__init__.py").write_text("raise ImportError('not a real torch')\n")
    (fake_site / "torch" / "version.py").write_text("__version__ = '9.9.9'\ncuda = None\n")
    no_torch = "/usr/bin/python3"
    if not Path(no_torch).exists():
        pytest.skip("needs a system python without torch at /usr/bin/python3")
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1),
            ("node1", 1, {"env": {"PYTHONPATH": str(fake_site)}}),  # torch 9.9.9 first
            ("node2", 1, {"python": no_torch}),
        ],
    )
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 2
    assert "nothing was started" in result.stderr
    assert "torch 9.9.9 differs from 2.13.0" in result.stderr
    assert f"torch is not installed for {no_torch}" in result.stderr


def test_an_option_a_hosts_torchrun_lacks_fails_preflight(sim_cluster, tmp_path: Path) -> None:
    """Read from each host's own run.py, judged by its own argparse: a typo in
    --torchrun-args, and an old torch that lacks an option clusterlaunch passes (torch 1.x
    spelled --nproc_per_node only). Both printed torchrun's usage on every host after the
    job started, and ended it with 2."""
    old = tmp_path / "site"
    (old / "torch" / "distributed").mkdir(parents=True)
    (old / "torch" / "__init__.py").write_text("raise ImportError('not a real torch')\n")
    (old / "torch" / "version.py").write_text("__version__ = '1.9.0'\ncuda = None\n")
    (old / "torch" / "distributed" / "run.py").write_text(
        "def get_args_parser(parser):\n"
        + "".join(
            f"    parser.add_argument({name!r})\n" for name in ("--nnodes", "--nproc_per_node")
        )
    )
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    typo = run_cli(
        "run", sim_cluster, "--torchrun-args=--monitor-intervals 1", str(hosts), "allreduce.py"
    )
    assert typo.returncode == 2 and "[r0 " not in typo.stdout, typo.stderr
    assert typo.stderr.count("unrecognized arguments: --monitor-intervals") == 2, typo.stderr
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"env": {"PYTHONPATH": str(old)}})]
    )
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 2 and "[r0 " not in result.stdout, result.stderr
    [row] = [line for line in result.stderr.splitlines() if line.startswith("1 ")]
    assert "torchrun here (torch 1.9.0) refuses its options: unrecognized arguments: " in row
    assert "--nproc-per-node" in row


@both_clients
def test_interrupt_while_a_host_hangs_in_the_handshake(tmp_path: Path, client: str) -> None:
    import socket

    # Accepts TCP but never speaks SSH: the handshake would wait for the timeout.
    with socket.socket() as silent:
        silent.bind(("127.0.0.99", 0))
        silent.listen(5)
        port = silent.getsockname()[1]
        hosts = write_hosts(tmp_path / "hosts.yaml", [("127.0.0.99", 1, {"port": port})])
        options = ("--ssh-client", client, "--connect-timeout", "60")
        process = start_cli("exec", None, *options, str(hosts), "--", "true")
        try:
            time.sleep(1.5)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=10) == 130
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_agent_killed_on_a_host_takes_its_job_with_it(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    from clusterlaunch.testing import find_processes

    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    job = f"agentkill-{os.getpid()}"
    process = start_cli(
        "run", sim_cluster, "--job-id", job, "--grace", "2", str(hosts), "sleeper.py"
    )
    try:
        wait_for_lines(process, b" up", 2, timeout=90)
        node1 = sim_cluster.host("node1").marker
        agents = [
            p for p in find_processes([node1]) if "--rank-files" in p.cmdline and "-c" in p.cmdline
        ]
        assert len(agents) == 1, agents
        os.kill(agents[0].pid, signal.SIGKILL)  # nothing can run in the agent now
        assert process.wait(timeout=30) == 255
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    # torchrun got SIGTERM from the kernel (parent-death signal) and took its workers.
    assert_no_orphans(sim_cluster, timeout=5.0)
    # The dead agent could not release its claim nor remove its files; the next agent to
    # finish on that machine (here node0's, which shares it) cleans up after it.
    host = sim_cluster.host("node1")
    claim = Path(records.private_state_dir() or "", f"{job}@{host.addr}_{host.port}.claim")
    deadline = time.monotonic() + 5
    while os.path.lexists(claim) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.lexists(claim) and not claim.with_suffix("").exists()


def test_proxy_command(sim_cluster_factory, tmp_path: Path) -> None:
    cluster = sim_cluster_factory(2)
    config = tmp_path / "ssh_config"
    text = Path(cluster.ssh_config).read_text()
    hop = f"ProxyCommand ssh -F {cluster.ssh_config} -W %h:%p node0"
    config.write_text(text.replace("Host node1\n", f"Host node1\n    {hop}\n"))
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1)])
    args = (
        "--ssh-config",
        str(config),
        str(hosts),
        "--",
        "sh",
        "-c",
        "echo $CLUSTERLAUNCH_SIM_HOST",
    )
    result = run_cli("exec", None, *args)
    assert result.returncode == 0, result.stderr
    assert "-node1" in result.stdout
    cluster.kill_host("node0")  # the proxy's route: node1 is unreachable without it
    started = time.monotonic()
    again = run_cli("exec", None, *args)
    took = time.monotonic() - started
    assert again.returncode == 2 and "nothing was started" in again.stderr
    # The proxy's end and its own words, at once: paramiko's ProxyCommand spun on
    # the closed pipe until the banner timeout, four tries (43 s measured).
    assert "exited with status 255" in again.stderr and "Connection refused" in again.stderr
    assert took < CONNECT_TIMEOUT_S, f"{took:.1f} s"


@both_clients
def test_a_suspended_controller_is_not_a_lost_host(
    sim_cluster, tmp_path: Path, client: str
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    script = "echo started; sleep 12; echo finished"
    argv = ("--ssh-client", client, str(hosts), "--", "sh", "-c", script)
    process = start_cli("exec", sim_cluster, *argv)
    try:
        wait_for_lines(process, b"started", 2, timeout=60)
        process.send_signal(signal.SIGSTOP)  # Ctrl-Z: longer than keepalives allow,
        time.sleep(8)  # shorter than the hosts' 15 s heartbeat timeout
        process.send_signal(signal.SIGCONT)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err.decode()
        assert out.count(b"finished") == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
