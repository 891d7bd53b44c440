"""``clusterlaunch doctor``, ``stacks`` and ``run --stall-timeout`` on simulated loopback hosts.

Every loopback host is this machine, reached at its own 127.0.0.x: a host's
name resolving to loopback is therefore no finding here (peers that reach a
host over loopback are on that machine, where loopback works). That finding
is tested in the namespace tier (test_doctor_netns.py), where each host has
its own name, /etc/hosts and address, as a real host has.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.cluster.support import PYTHON, run_cli, start_cli, wait_for_lines, write_hosts

pytestmark = pytest.mark.cluster
HOSTS3 = [("node0", 1), ("node1", 1), ("node2", 1)]


def test_three_healthy_hosts_pass_and_json_has_every_figure(sim_cluster_factory, tmp_path):
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    result = run_cli("doctor", cluster, "--json", str(hosts))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["findings"] == [] and report["errors"] == 0
    assert sorted(report["hosts"]) == ["node0", "node1", "node2"]
    for name, host in report["hosts"].items():
        facts = host["facts"]
        assert facts["python"] and "torch" in facts and facts["nccl"] is None  # a CPU host
        assert facts["gpu_tool"] is None and facts["gpus"] == []
        assert facts["interfaces"]["lo"] == "127.0.0.1"
        assert facts["route_interface"] == "lo" and facts["route_source"].startswith("127.")
        assert facts["ifname_env"] == {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None}
        assert facts["disk_free_bytes"] > 0 and abs(host["clock_skew_s"]) < 1.0
        assert host["reached_at"] == [cluster.host(name).addr]
    matrix = report["matrix"]
    assert matrix == {
        src: {dst: (None if src == dst else True) for dst in matrix} for src in matrix
    }
    assert len(matrix) == 3
    text = run_cli("doctor", cluster, str(hosts))
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == "doctor: no problems found on 3 host(s)"


@pytest.mark.parametrize("variable", ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"])
def test_socket_ifname_naming_a_missing_interface_is_one_finding(
    sim_cluster_factory, tmp_path, variable
):
    cluster = sim_cluster_factory(3)
    entries = [("node0", 1), ("node1", 1, {"env": {variable: "ib9"}}), ("node2", 1)]
    hosts = write_hosts(tmp_path / "hosts.yaml", entries)
    result = run_cli("doctor", cluster, "--json", str(hosts))
    assert result.returncode == 1, result.stderr[-2000:]
    findings = json.loads(result.stdout)["findings"]
    assert [(f["level"], f["where"]) for f in findings] == [("error", "node1")]
    assert findings[0]["text"].startswith(f"{variable}=ib9")


@pytest.mark.torch
def test_bandwidth_reports_busbw_for_every_size(sim_cluster_factory, tmp_path, record_property):
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    result = run_cli("doctor", cluster, "--bandwidth", "--json", str(hosts), timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    bench = report["all_reduce"]
    assert (bench["backend"], bench["ranks"]) == ("gloo", 3)
    assert [row["bytes"] for row in bench["rows"]] == [1024 * 4**i for i in range(9)]
    for row in bench["rows"]:
        # Both are rounded to 4 decimals: up to 0.5e-4 + 0.5e-4 * 4/3 apart.
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 4 / 3, rel=1e-3, abs=1.2e-4)
        assert row["seconds"] > 0
    tput = report["throughput"]
    assert {src: sorted(row) for src, row in tput.items()} == {
        "node0": ["node1", "node2"],
        "node1": ["node0", "node2"],
        "node2": ["node0", "node1"],
    }
    assert all(cell["mbps"] > 0 for row in tput.values() for cell in row.values())
    record_property("busbw_64MiB_gbps", bench["rows"][-1]["busbw_gbps"])
    record_property("tcp_node0_node1_MBps", tput["node0"]["node1"]["mbps"])


def _deadlock(cluster, tmp_path: Path, *options: str):
    hosts = write_hosts(tmp_path / "hosts.yaml", HOSTS3)
    process = start_cli("run", cluster, *options, str(hosts), "deadlock.py")
    return hosts, process


def _kill(cluster, hosts: Path, job_id: str, process) -> None:
    """``clusterlaunch kill JOB_ID`` ends the job: its ``run`` exits 137."""
    killed = run_cli("kill", cluster, str(hosts), job_id)
    assert killed.returncode == 0, killed.stderr
    assert process.wait(timeout=60) == 137


def _end(process) -> None:
    """The ``run`` started here ended, whatever the test found."""
    if process.poll() is None:
        process.kill()
        process.wait()


@pytest.mark.torch
def test_stacks_show_each_rank_blocked_in_its_collective(
    sim_cluster_factory, tmp_path, assert_no_orphans
):
    cluster = sim_cluster_factory(3)
    hosts, process = _deadlock(cluster, tmp_path, "--job-id", "stuck-1", "--grace", "2")
    try:
        wait_for_lines(process, b"BLOCKING", 3, timeout=120)
        result = run_cli("stacks", cluster, str(hosts), "stuck-1")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        lines = result.stdout.splitlines()
        for rank, call, host in (
            (0, "all_reduce", "node0"),
            (1, "recv", "node1"),
            (2, "recv", "node2"),
        ):
            mine = [line for line in lines if line.startswith(f"[r{rank} {host}:0]")]
            assert any(f"    {call} (torch/distributed/" in line for line in mine), mine
            assert any("wait_in_" in line and "deadlock.py" in line for line in mine), mine
        # Read by an interpreter without py-spy beside it: py-spy is found next to the
        # job's own Python (its venv), not only next to --python's or on PATH.
        bare = run_cli("stacks", cluster, "--python", "/usr/bin/python3", str(hosts), "stuck-1")
        assert bare.returncode == 0, bare.stdout[-3000:] + bare.stderr[-2000:]
        assert "    recv (torch/distributed/" in bare.stdout
        _kill(cluster, hosts, "stuck-1", process)
    finally:
        _end(process)
    assert_no_orphans(cluster)


def test_a_host_whose_python_or_setup_keeps_the_doctor_from_running_is_exit_2(
    sim_cluster, tmp_path
):
    """As ``check``: bad input (exit 2, a line per host with the fix), not a finding (1)."""
    entries = [("node0", 1, {"python": "/nonexistent/py"}), ("node1", 1, {"setup": "exit 3"})]
    hosts = write_hosts(tmp_path / "hosts.yaml", [*entries, ("node2", 1)])
    result = run_cli("doctor", sim_cluster, "--json", str(hosts))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    head, table, python, setup = result.stderr.splitlines()
    assert head == "clusterlaunch: preflight failed on 2 host(s); nothing was started"
    assert table == "host   check   problem"
    # The shell's last lines come in between: a login's own noise too (pyenv's rehash
    # racing another login's printed "cannot rehash" into one CI run).
    assert python.startswith("node0  doctor  /nonexistent/py not found (exit 127): ")
    # The host's /bin/sh says it, which sets the variables and runs python (dash: "sh: 1:
    # exec: /nonexistent/py: not found"; bash as sh: "... No such file or directory").
    assert python.endswith(
        (
            "/nonexistent/py: not found; fix python: or --python",
            "/nonexistent/py: No such file or directory; fix python: or --python",
        )
    ), python
    assert setup == "node1  doctor  setup failed (exit 3): no output; fix setup:"


def test_stacks_of_no_such_job_exit_1(sim_cluster, tmp_path):
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("stacks", sim_cluster, str(hosts), "no-such-job")
    assert result.returncode == 1
    assert "no running workers of job no-such-job" in result.stderr


@pytest.mark.torch
def test_stall_timeout_kill_prints_stacks_and_ends_the_job(
    sim_cluster_factory, tmp_path, assert_no_orphans, record_property
):
    cluster = sim_cluster_factory(3)
    options = ("--stall-timeout", "5", "--stall-action", "kill", "--grace", "3")
    _, process = _deadlock(cluster, tmp_path, *options)
    assert process.stderr is not None
    seen = []
    try:
        for line in iter(process.stderr.readline, b""):
            seen.append(line)
            if b"(--stall-timeout): the Python stack" in line:
                break
        fired = time.monotonic()
        code = process.wait(timeout=120)
        after_stall = time.monotonic() - fired
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert_no_orphans(cluster)
    err = b"".join(seen).decode() + process.stderr.read().decode()
    assert code == 125, err[-3000:]
    assert "no rank has printed for 5 s (--stall-timeout)" in err
    assert "job stopped: no rank printed for 5 s" in err
    for rank in range(3):  # workers' stacks; torchrun's if it had not started them yet
        worker = f"[r{rank} node{rank}:0] Thread "
        assert worker in err or re.search(rf"\[node{rank}\] +torchrun \(no workers", err), err
    # py-spy on every host (~1 s here), then teardown within --grace 3: generous bound.
    assert after_stall < 3 + 30, after_stall
    record_property("stall_to_exit_s", round(after_stall, 1))
    assert_no_orphans(cluster, timeout=3 + 5)  # grace + margin: nothing left


@pytest.mark.torch
def test_stall_stacks_never_hold_up_the_output_or_the_timeout(
    sim_cluster_factory, tmp_path, assert_no_orphans
):
    """jobctl runs each host's setup first: one that sleeps 40 s (from the job's start on)
    held the supervisor's loop as long, so ticks waited and --timeout 12 fired 40 s late.
    The stacks, never in (the job ends first), are given up and their setups killed."""
    cluster = sim_cluster_factory(2)
    slow = "if [ -e {0} ]; then sleep 40; fi; touch {0}"
    entries = [(host, 1, {"setup": slow.format(tmp_path / host)}) for host in ("node0", "node1")]
    hosts = write_hosts(tmp_path / "hosts.yaml", entries)
    options = ("--stall-timeout", "3", "--timeout", "12", "--grace", "2")
    began = time.monotonic()
    result = run_cli("run", cluster, *options, str(hosts), "quiet_then_ticks.py", timeout=90)
    took = time.monotonic() - began
    assert result.returncode == 124, result.stderr[-3000:]
    assert "no rank has printed for 3 s (--stall-timeout)" in result.stderr
    assert "rank 0 tick 3" in result.stdout and "rank 1 tick 3" in result.stdout, result.stdout
    assert took < 35, (took, result.stderr[-3000:])  # 12 s, connect and teardown; was 45
    assert_no_orphans(cluster)


@pytest.mark.torch
def test_stacks_show_a_node_waiting_for_node_0_s_store(
    sim_cluster_factory, tmp_path, assert_no_orphans
):
    """node0's torchrun starts 60 s late: node1's torchrun, started through
    remote/storewait.py's program, has no workers and is found and dumped."""
    cluster = sim_cluster_factory(2)
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "-m torch.distributed.run" ] && sleep 60\nexec {PYTHON} "$@"\n'
    )
    python.chmod(0o755)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    text = hosts.read_text().replace(json.dumps(PYTHON), json.dumps(str(python)))
    hosts.write_text(text)
    process = start_cli(
        "run", cluster, "--job-id", "waits-1", "--grace", "2", str(hosts), "allreduce.py"
    )
    try:
        deadline, lines = time.monotonic() + 60, []
        while time.monotonic() < deadline:  # until node1's torchrun is in the wait
            result = run_cli("stacks", cluster, str(hosts), "waits-1")
            lines = [line for line in result.stdout.splitlines() if line.startswith("[node1]")]
            if any("(<string>:" in line for line in lines):
                break
            time.sleep(1)
        assert lines[:1] == ["[node1] torchrun (no workers running):"], result.stdout
        assert any("<module> (<string>:" in line for line in lines), lines
        _kill(cluster, hosts, "waits-1", process)
    finally:
        _end(process)
    assert_no_orphans(cluster)
