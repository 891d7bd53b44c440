"""``exec`` runs a command as ``ssh HOST COMMAND`` does: its start, status and environment.

Plain ``ssh`` with the same config is the ground truth, against real sshd hosts.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster
from tests.binaries import foreign_elf, foreign_elf_runs_here
from tests.cluster.support import run_cli, start_cli, wait_for_lines, write_hosts

pytestmark = [pytest.mark.cluster]


def by_ssh(cluster: LoopbackCluster, command: str) -> subprocess.CompletedProcess[str]:
    ssh = ["ssh", "-F", str(cluster.ssh_config), "node0", command]
    return subprocess.run(ssh, capture_output=True, text=True, timeout=60)


def test_a_command_starts_or_fails_with_the_status_ssh_gives(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """No #! line: run by /bin/sh; 126 found but not executable, or binary by bash's rule
    (a foreign ELF, ELF magic, a NUL in the first line: never read as shell commands); 127
    its #! interpreter missing, said so (not "No such file" for a file that is there)."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    plain, bad = tmp_path / "plain.sh", tmp_path / "bad.sh"
    plain.write_text('echo "ran with $1"\n')
    bad.write_text("#!/nonexistent/interp\n")
    binaries = [tmp_path / "elf-text", tmp_path / "nul", tmp_path / "foreign"]
    binaries[0].write_bytes(b"\x7fELF echo ran\n")
    binaries[1].write_bytes(b"echo ran\0\n")
    binaries[2].write_bytes(foreign_elf())
    if foreign_elf_runs_here():  # qemu-user's binfmt_misc handler: it runs, ssh's too
        binaries.pop()
    for program in (plain, bad, *binaries):
        program.chmod(0o755)
    binary = "cannot execute binary file: Exec format error"
    said = {
        **{str(path): f"cannot start {path}: {binary}" for path in binaries},
        str(plain): "",
        "/etc/passwd": "cannot start /etc/passwd: [Errno 13] Permission denied",
        str(tmp_path): f"cannot start {tmp_path}: {tmp_path} is a directory",
        str(bad): f"cannot start {bad}: its #! interpreter /nonexistent/interp is not found",
    }
    for command, words in said.items():
        truth = by_ssh(sim_cluster, f"{command} x")
        ours = run_cli("exec", sim_cluster, str(hosts), "--", command, "x")
        assert ours.returncode == truth.returncode, (command, ours.stderr)
        assert ours.stdout == "".join(f"[node0] {line}\n" for line in truth.stdout.splitlines())
        assert words in ours.stderr, (command, ours.stderr)
    assert by_ssh(sim_cluster, f"{plain} x").stdout == "ran with x\n"
    assert [by_ssh(sim_cluster, c).returncode for c in ("/etc/passwd", str(bad))] == [126, 127]
    assert {by_ssh(sim_cluster, str(path)).returncode for path in binaries} == {126}


# What clusterlaunch itself sets or changes (docs/cli.md: the workdir, its variables),
# and what differs between any two SSH sessions.
OWN = ("CLUSTERLAUNCH_", "CUDA_VISIBLE_DEVICES=", "OLDPWD=", "PWD=", "SSH_CLIENT=", "SSH_CONN")


def session_env(lines: list[str]) -> list[str]:
    return sorted(line for line in lines if not line.startswith((*OWN, "_=")))


def test_the_command_gets_the_environment_ssh_gives(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """No LC_CTYPE=C.UTF-8 of the agent's Python (PEP 538 locale coercion); a user's own
    LC_CTYPE and PYTHONCOERCECLOCALE pass through as given."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    truth = by_ssh(sim_cluster, "env")
    assert truth.returncode == 0 and "LC_CTYPE=" not in truth.stdout  # else no test of it
    ours = run_cli("exec", sim_cluster, str(hosts), "--", "env")
    assert ours.returncode == 0, ours.stderr
    lines = [line.removeprefix("[node0] ") for line in ours.stdout.splitlines()]
    assert session_env(lines) == session_env(truth.stdout.splitlines())
    given = ("--env", "LC_CTYPE=C", "--env", "PYTHONCOERCECLOCALE=1")
    ours = run_cli("exec", sim_cluster, *given, str(hosts), "--", "sh", "-c", "env | grep C")
    assert {"[node0] LC_CTYPE=C", "[node0] PYTHONCOERCECLOCALE=1"} <= set(ours.stdout.split("\n"))


@pytest.mark.torch
def test_torchrun_gets_the_environment_ssh_gives(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """run: torchrun starts with the session's environment; it (a Python) then coerces
    the locale for its ranks itself, as it does when started over ssh by hand."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    program = tmp_path / "parent_env.sh"
    program.write_text("#!/bin/sh\ntr '\\0' '\\n' < /proc/$PPID/environ\n")
    program.chmod(0o755)
    truth = by_ssh(sim_cluster, "env")
    ours = run_cli("run", sim_cluster, "--no-python", str(hosts), str(program))
    assert ours.returncode == 0, ours.stderr
    lines = [line.split("] ", 1)[1] for line in ours.stdout.splitlines() if line.startswith("[r0")]
    torchrun = [line for line in lines if not line.startswith(("TORCH", "PET_", "OMP_"))]
    assert session_env(torchrun) == session_env(truth.stdout.splitlines())


FAIL_ON_NODE1 = 'if [ -n "$FAIL_CODE" ]; then echo fail; exit "$FAIL_CODE"; fi; sleep 30'


@pytest.mark.parametrize("stop", ["--timeout", "ctrl-c"])
def test_a_stop_names_the_hosts_that_had_failed_before_it(
    sim_cluster: LoopbackCluster, tmp_path: Path, stop: str
) -> None:
    """docs/cli.md: the summary names every host that failed, with its code; the status is
    the stop's (124, 130): what ended the command."""
    entries = [("node0", 1), ("node1", 1, {"env": {"FAIL_CODE": "3"}})]
    hosts = str(write_hosts(tmp_path / "hosts.yaml", entries))
    if stop == "--timeout":
        result = run_cli(
            "exec", sim_cluster, "--timeout", "3", "--grace", "1", hosts, "sh", "-c", FAIL_ON_NODE1
        )
        code, err = result.returncode, result.stderr
    else:
        process = start_cli("exec", sim_cluster, "--grace", "1", hosts, "sh", "-c", FAIL_ON_NODE1)
        wait_for_lines(process, b"[node1] fail", 1, timeout=60)
        time.sleep(1.5)  # node1's end reaches the controller
        process.send_signal(signal.SIGINT)
        err = process.communicate(timeout=60)[1].decode()
        code = process.returncode
    assert code == (124 if stop == "--timeout" else 130), err
    assert "; failed before that: node1 (3)" in err, err


def test_a_job_id_still_running_is_refused_and_nothing_starts(
    sim_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    """As run's preflight refuses it: exit 2, one line, the second command not started."""
    hosts = str(write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)]))
    first = start_cli(
        "exec", sim_cluster, "--job-id", "dup", hosts, "sh", "-c", "echo up; sleep 30"
    )
    try:
        wait_for_lines(first, b"] up", 2, timeout=60)
        second = run_cli(
            "exec", sim_cluster, "--include", "node1", "--job-id", "dup", hosts, "echo", "second"
        )
        assert second.returncode == 2, second.stderr
        assert second.stdout == "" and second.stderr.count("\n") == 1, second.stderr
        assert second.stderr.startswith("clusterlaunch: error: node")
        assert "a job with this id is already running here (node " in second.stderr
        assert "choose another --job-id, or clusterlaunch kill it" in second.stderr
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert first.returncode == 130
