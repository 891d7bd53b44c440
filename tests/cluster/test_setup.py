"""A host's ``setup:`` against real sshd hosts: bounded, stdin closed, nothing left behind.

Also the preflight's job-id checks, which the probe makes under the same prefix.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from clusterlaunch.testing import find_processes
from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster]

STUCK = "sleep 599"  # told apart from the jobs' own `sleep 600`


def _wait_for_process(cluster, argv: str, timeout: float = 60) -> None:
    """Until a process with command line ``argv`` runs on the simulated hosts."""
    deadline = time.monotonic() + timeout
    while not any(p.cmdline == argv for p in find_processes(cluster.markers())):
        assert time.monotonic() < deadline, f"{argv!r} never started on the hosts"
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


ARGS_AFTER_HOSTS = {
    "run": ["sleeper.py"],  # the preflight's setup
    "exec": ["--", "sleep", "600"],  # the agent's
    "ps": [],  # jobctl's (ps, kill and stacks wait on it alike)
    "kill": ["no-such-job"],
}


@pytest.mark.parametrize("command", list(ARGS_AFTER_HOSTS))
def test_interrupt_during_a_stuck_setup_leaves_nothing(
    sim_cluster, tmp_path: Path, assert_no_orphans, command: str
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": STUCK})])
    process = start_cli(command, sim_cluster, str(hosts), *ARGS_AFTER_HOSTS[command])
    try:
        _wait_for_process(sim_cluster, STUCK)
        interrupted = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 130
        exited = time.monotonic() - interrupted
    finally:
        _stop(process)
    assert process.stderr is not None
    assert "interrupted (Ctrl-C)" in process.stderr.read().decode()
    # The setup's group gets SIGTERM at once, SIGKILL for stragglers 2 s later.
    assert_no_orphans(sim_cluster, timeout=5.0)
    gone = time.monotonic() - interrupted
    print(f"{command}: exit {exited:.2f} s, no process left {gone:.2f} s after Ctrl-C")
    assert exited < 10


@pytest.mark.parametrize("command", list(ARGS_AFTER_HOSTS))
def test_two_sigterms_at_once_still_end_every_stuck_setup(
    sim_cluster, tmp_path: Path, assert_no_orphans, command: str
) -> None:
    """GNU timeout sends SIGTERM to its command, then to its process group: the command
    gets two at once. The second cut the kills of the setups short, and they ran on until
    their --setup-timeout: every one of 6 tries by hand (found by a helper)."""
    setup = {"setup": STUCK}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    process = start_cli(command, sim_cluster, str(hosts), *ARGS_AFTER_HOSTS[command])
    try:
        _wait_for_process(sim_cluster, STUCK)
        time.sleep(0.5)  # both setups reported their PIDs
        process.send_signal(signal.SIGTERM)
        time.sleep(0.001)  # GNU timeout's two kill(2) calls land about this far apart
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        _stop(process)
    assert_no_orphans(sim_cluster, timeout=5.0)


def test_a_killed_controller_leaves_a_setup_that_ends_by_its_timeout(
    sim_cluster, tmp_path: Path, assert_no_orphans
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": STUCK})])
    process = start_cli("exec", sim_cluster, "--setup-timeout", "3", str(hosts), "--", "true")
    try:
        _wait_for_process(sim_cluster, STUCK)
        process.send_signal(signal.SIGKILL)  # nobody left to kill the setup but its watchdog
        process.wait(timeout=10)
    finally:
        _stop(process)
    assert_no_orphans(sim_cluster, timeout=10.0)  # 3 s limit, SIGKILL round 2 s after


def test_setup_reading_stdin_does_not_hang(sim_cluster, tmp_path: Path) -> None:
    setup = 'read line || true\ncat >/dev/null\nexport READ="[$line]"'
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": setup}), ("node1", 1)])
    checked = run_cli("check", sim_cluster, str(hosts), timeout=60)
    assert checked.returncode == 0, checked.stderr
    echo = ["sh", "-c", 'echo "read=$READ"']
    ran = run_cli("exec", sim_cluster, str(hosts), "--", *echo, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert "[node0] read=[]" in ran.stdout  # the setup read nothing: stdin is /dev/null


def test_a_quick_setup_leaves_the_console_clean(sim_cluster, tmp_path: Path) -> None:
    # With its EXIT trap set before the watchdog was forked, bash 5.2 printed
    # "bash: line 1: wait_for: No record of process N" in 27 of 30 runs over ssh.
    setup = {"setup": "export CL_SETUP_RAN=1"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    for _ in range(5):
        result = run_cli("exec", sim_cluster, str(hosts), "--", "sh", "-c", "echo $CL_SETUP_RAN")
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("] 1\n") == 2, result.stderr
        # Not an empty stderr: the hosts' own rc files may print (this machine's
        # pyenv init says "cannot rehash" when sessions race for its lock).
        assert "No record of process" not in result.stderr, result.stderr


def test_setup_past_its_timeout_fails_the_preflight_naming_the_host(
    sim_cluster, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": STUCK})])
    began = time.monotonic()
    result = run_cli("run", sim_cluster, "--setup-timeout", "2", str(hosts), "sleeper.py")
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - began < 30
    assert "nothing was started" in result.stderr
    [row] = [line for line in result.stderr.splitlines() if line.startswith("1 ")]
    assert "node1" in row and "setup did not finish within 2 s and was stopped" in row


def test_exec_counts_a_setup_past_its_timeout_as_not_started_not_as_a_lost_host(
    sim_cluster, tmp_path: Path
) -> None:
    # Its watchdog's SIGTERM took the shell with it, no status: this read as a
    # lost host (255, "connection ended without a report").
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": STUCK})])
    result = run_cli(
        "exec", sim_cluster, "--setup-timeout", "2", str(hosts), "--", "echo", "ran", timeout=60
    )
    assert result.returncode == 2, result.stderr
    assert "[node0] ran" in result.stdout and "[node1]" not in result.stdout
    assert "[node1] clusterlaunch: setup did not finish within 2 s" in result.stderr
    assert "1 of 2 host(s) failed: node1 (2)" in result.stderr
    assert "without a report" not in result.stderr and "lost" not in result.stderr


ENDS_THE_SHELL = {
    "setup": ({"setup": "exit 0"}, "setup: ended the shell (exit 0) before clusterlaunch's Python"),
    "python": ({"python": "/bin/true"}, "the shell ended (exit 0) before clusterlaunch's Python"),
}


@pytest.mark.parametrize("cause", list(ENDS_THE_SHELL))
def test_a_shell_that_exits_0_before_python_is_a_failed_host(
    sim_cluster, tmp_path: Path, cause: str
) -> None:
    # A sourced env.sh ending in "exit 0", or python: /bin/true, ran nothing: exec said
    # "connection ended without a report (exit 0)" and exited 0.
    fields, said = ENDS_THE_SHELL[cause]
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, fields), ("node1", 1)])
    result = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == 255, result.stderr
    assert "[node1] ran" in result.stdout and "[node0]" not in result.stdout
    assert f"clusterlaunch: node0: {said}" in result.stderr
    assert "1 of 2 host(s) failed: node0 (255)" in result.stderr
    assert "without a report" not in result.stderr and "lost" not in result.stderr
    for command in ("check", "run"):
        result = run_cli(command, sim_cluster, str(hosts), "sleeper.py", timeout=60)
        assert result.returncode == 2, result.stderr
        table = (result.stdout + result.stderr).splitlines()  # check: stdout, run: stderr
        [row] = [line for line in table if line.startswith("0 ")]
        assert said in row and "no output" not in row


@pytest.mark.parametrize("program", ["/bin/bash", "/usr/bin/env", "/bin/cat"])
def test_a_python_that_is_no_python_is_named_with_its_fix(
    sim_cluster, tmp_path: Path, program: str
) -> None:
    # exec exited with the program's own status (bash 2, env 125, cat 1) and said "the shell
    # failed before clusterlaunch's Python started"; check and run quoted bash's syntax error.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"python": program}), ("node1", 1)])
    said = f"python: {program} is not a Python (it exited "
    fix = "set python: to a Python 3.8 or newer in the hosts file (or --python)"
    result = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == 2, result.stderr
    [line] = [
        line for line in result.stderr.splitlines() if line.startswith("clusterlaunch: node0")
    ]
    assert line.startswith(f"clusterlaunch: node0: {said}") and line.endswith(fix), line
    assert "1 of 2 host(s) failed: node0 (2)" in result.stderr
    for command in ("check", "run"):
        result = run_cli(command, sim_cluster, str(hosts), "sleeper.py", timeout=60)
        assert result.returncode == 2, result.stderr
        table = (result.stdout + result.stderr).splitlines()  # check: stdout, run: stderr
        [row] = [line for line in table if line.startswith("0 ")]
        assert said in row and row.endswith(fix), row


def test_a_missing_workdir_fails_the_preflight_with_the_fix(sim_cluster, tmp_path: Path) -> None:
    # It said only "the shell failed before Python started (exit 1): bash: line 1: cd: ...".
    missing = tmp_path / "no-such-dir"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(missing)})])
    result = run_cli("check", sim_cluster, str(hosts), "sleeper.py", timeout=60)
    assert result.returncode == 2, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("0 ")]
    assert f"cd: {missing}: No such file or directory; the workdir is not there" in row
    assert row.endswith("create it on the host, or fix workdir: in the hosts file (or --workdir)")


def test_a_slow_setup_is_announced(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": "sleep 6"})])
    result = run_cli("check", sim_cluster, str(hosts), timeout=60)
    assert result.returncode == 0, result.stderr
    assert "clusterlaunch: node1: setup still running after 5 s (--setup-timeout 300)" in (
        result.stderr
    )
    assert "node0: setup" not in result.stderr


def test_a_duplicated_job_id_fails_the_preflight(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    job_id = f"dup-{uuid.uuid4().hex[:8]}"
    first = start_cli(
        "exec", sim_cluster, "--job-id", job_id, str(hosts), "--", "sh", "-c", "echo up; sleep 600"
    )
    try:
        wait_for_lines(first, b"up", 2, timeout=60)
        second = run_cli("run", sim_cluster, "--job-id", job_id, str(hosts), "sleeper.py")
        assert second.returncode == 2, second.stderr
        assert "nothing was started" in second.stderr
        assert "a job with this id is already running here" in second.stderr
        assert first.poll() is None  # the first job never noticed
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=30) == 130
    finally:
        _stop(first)


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_torchrun_option_set_in_the_hosts_environment_fails_the_preflight(
    sim_cluster, tmp_path: Path, command: str
) -> None:
    """PET_TEE=3 made every line come twice, PET_STANDALONE=1 hung the job: --env refuses
    them, and the preflight finds what a host's login files or setup: export."""
    setup = {"setup": "export PET_TEE=3"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, setup)])
    args = [str(hosts), "allreduce.py"] if command == "run" else [str(hosts)]
    result = run_cli(command, sim_cluster, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "PET_TEE is set there (by its login files or setup:)" in said, said
    assert said.count("PET_TEE is set there") == 1  # node1 only
    assert "[r0 " not in result.stdout  # nothing started


WORKER_IDENTICAL = "TORCH_ELASTIC_WORKER_IDENTICAL"


@pytest.mark.parametrize("name", [WORKER_IDENTICAL, "PET_TEE"])
def test_torchrun_variables_of_this_shell_fail_a_localhost_nodes_preflight(
    sim_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """localhost inherits the controller's environment: TORCH_ELASTIC_WORKER_IDENTICAL=1
    there gave its ranks RANK 2-3 of 4 in a job of 3 (node0 1, localhost 2), which hung."""
    marker = tmp_path / "started"
    env = {"env": {"MARKER_FILE": str(marker)}}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, env), ("localhost", 2, env)])
    monkeypatch.setenv(name, "1" if name == WORKER_IDENTICAL else "3")
    result = run_cli("run", sim_cluster, str(hosts), "touch_marker.py")
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "nothing was started" in said, said
    (row,) = [line for line in said.splitlines() if name in line]  # localhost only
    assert row.split()[:2] == ["1", "localhost"], row
    assert f"{name} is set in this shell's environment, which localhost inherits; " in row
    assert list(tmp_path.glob("started.*")) == []


def test_worker_identical_set_by_a_hosts_setup_fails_its_preflight(
    sim_cluster, tmp_path: Path
) -> None:
    setup = {"setup": f"export {WORKER_IDENTICAL}=1"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2, setup)])
    result = run_cli("run", sim_cluster, str(hosts), "allreduce.py")
    assert result.returncode == 2, result.stdout + result.stderr
    said = result.stdout + result.stderr
    (row,) = [line for line in said.splitlines() if WORKER_IDENTICAL in line]  # node1 only
    assert row.split()[:2] == ["1", "node1"], row
    assert row.endswith(
        f"{WORKER_IDENTICAL} is set there (by its login files or setup:); it makes torchrun "
        "give wrong RANK and WORLD_SIZE (and a hang) when hosts run different process "
        "counts: unset it"
    ), row
    assert "[r0 " not in result.stdout  # nothing started


FAILS_BEFORE_PYTHON = {
    "workdir": (
        {"workdir": "/no/such/dir"},
        1,
        "the shell failed (exit 1) before clusterlaunch's Python started; the workdir is not "
        "there (or not a directory this user may enter): create it on the host, or fix workdir:",
    ),
    "setup": (
        {"setup": "echo about to fail; exit 3"},
        3,
        "setup: failed (exit 3) before clusterlaunch's Python started; fix setup:",
    ),
    "python": (
        {"python": "/no/such/python"},
        127,
        "the shell failed (exit 127) before clusterlaunch's Python started: no such python? "
        "fix python: in the hosts file (or --python)",
    ),
}


@pytest.mark.parametrize("cause", list(FAILS_BEFORE_PYTHON))
def test_exec_says_what_failed_before_python_started(
    sim_cluster, tmp_path: Path, cause: str
) -> None:
    # exec said "connection ended without a report (exit 1)": a lost host's words, for a
    # cd that failed on a host that answered.
    fields, status, said = FAILS_BEFORE_PYTHON[cause]
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, fields), ("node1", 1)])
    result = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == status, result.stderr
    assert "[node1] ran" in result.stdout and "[node0] ran" not in result.stdout
    assert f"clusterlaunch: node0: {said}" in result.stderr
    assert f"1 of 2 host(s) failed: node0 ({status})" in result.stderr
    assert "without a report" not in result.stderr and "lost" not in result.stderr


def test_check_names_the_fix_for_a_python_that_is_not_there(sim_cluster, tmp_path: Path) -> None:
    # The row ended with the shell's words; doctor's said what to change.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"python": "/no/such/python"})])
    result = run_cli("check", sim_cluster, str(hosts), "sleeper.py", timeout=60)
    assert result.returncode == 2, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("0 ")]
    assert "/no/such/python not found (exit 127): " in row
    assert row.endswith("; fix python: or --python")
