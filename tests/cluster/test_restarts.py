"""Job-level restarts on the simulated cluster: hosts crashed mid-training, real torchrun jobs.

A crashed host is :meth:`LoopbackCluster.kill_host`: its sshd and every process
started through it SIGKILLed, as a machine that loses power takes them down.
After each test nothing may be left running on any host.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterlaunch.core.exits import ExitStatus
from tests.cluster.support import (
    REPO,
    WORKERS,
    cli_argv,
    rank_lines,
    run_cli,
    start_cli,
    stderr_until,
    wait_for_lines,
    write_hosts,
)

pytestmark = [pytest.mark.cluster, pytest.mark.torch]
# Two starts of a 3-rank torch job: about 45 s each on this 2-core machine under load.
two_trainings = pytest.mark.timeout(480)

FAST = ("--grace", "2", "--restart-backoff", "0.5")


def _train(cluster, hosts: Path, checkpoint: Path, *flags: str) -> subprocess.Popen[bytes]:
    """ddp_train.py, slowed to about a second per epoch: time to crash a host mid-training."""
    argv = (*FAST, *flags, str(hosts), "examples/ddp_train.py")
    script = ("--epochs", "6", "--pace", "1", "--samples", "512", "--checkpoint", str(checkpoint))
    process = subprocess.Popen(
        cli_argv("run", cluster, *argv, *script),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return process


def _crash_during_training(
    cluster, process: subprocess.Popen[bytes], host: str, resumes: bool = True
) -> tuple[str, str, float | None]:
    """Crash ``host`` once epoch 2 is done: the job's stdout and stderr, and the seconds
    from the crash to training resumed (None when it does not resume)."""
    took = None
    assert process.stdout is not None and process.stderr is not None
    errors = concurrent.futures.ThreadPoolExecutor(1).submit(process.stderr.read)
    with _killed_if_left(process):
        seen = wait_for_lines(process, b"epoch 2/6", 1, timeout=240)
        cluster.kill_host(host)
        crashed = time.monotonic()
        if resumes:
            seen += wait_for_lines(process, b"resuming from", 1, timeout=240)
            took = round(time.monotonic() - crashed, 1)
        seen.append(process.stdout.read())  # the buffered reader's: communicate() would skip it
        process.wait(timeout=180)
    return b"".join(seen).decode(), errors.result(timeout=30).decode(), took


def _epochs(stdout: str) -> list[int]:
    return [int(m) for m in re.findall(r"\] epoch (\d+)/6 loss", stdout)]


@two_trainings
def test_a_spare_takes_a_crashed_hosts_place_and_training_resumes(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans, record_property
) -> None:
    cluster = sim_cluster_factory(4)
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1), ("node1", 1), ("node2", 1), ("node3", 1, {"spare": True})],
    )
    checkpoint = tmp_path / "ckpt.pt"
    process = _train(cluster, hosts, checkpoint, "--max-restarts", "2")
    out, err, took = _crash_during_training(cluster, process, "node1")
    record_property("crash_to_resumed_training_s", took)
    assert process.returncode == 0, err[-3000:]
    assert "node1 replaced by spare node3; 3 host(s), world size 3 (same rank layout)" in err
    assert "attempt 1 failed (host node1 was lost); restart 1 of 2" in err
    assert "job succeeded in attempt 2 (after 1 restart(s))" in err
    resumed = re.search(
        r"resuming from \S+ after epoch (\d+) \(.*restart count 1, world size 3", out
    )
    assert resumed, out[-3000:]
    epochs = _epochs(out)
    done = int(resumed[1])
    assert done >= 2 and epochs[-1] == 6
    # The epoch counter goes on from the checkpoint: epochs after the restart start at done+1.
    assert epochs[epochs.index(done) + 1 :][-(6 - done) :] == list(range(done + 1, 7))
    assert out.count("training on 3 rank(s)") == 2
    assert_no_orphans(cluster, timeout=5.0)


@two_trainings
@pytest.mark.parametrize("min_hosts", [2, 3])
def test_without_a_spare_the_job_shrinks_to_min_hosts(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans, min_hosts: int
) -> None:
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    flags = ("--max-restarts", "1", "--min-hosts", str(min_hosts))
    process = _train(cluster, hosts, tmp_path / "ckpt.pt", *flags)
    out, err, _ = _crash_during_training(cluster, process, "node1", resumes=min_hosts == 2)
    if min_hosts == 2:
        assert process.returncode == 0, err[-3000:]
        assert "node1 dropped; 2 host(s), world size 2 (ranks re-planned)" in err
        assert "restart count 1, world size 2" in out
        assert _epochs(out)[-1] == 6
    else:
        assert process.returncode == ExitStatus.HOST_LOST, err[-3000:]
        reason = [line for line in err.splitlines() if "--min-hosts is 3" in line]
        assert len(reason) == 1, err[-3000:]
        assert reason[0].startswith(
            "clusterlaunch: job failed: restart 1: only 2 usable host(s), --min-hosts is 3: node1 ("
        )
        assert out.count("training on") == 1  # no second attempt started
    assert_no_orphans(cluster, timeout=5.0)


@two_trainings
def test_a_crashed_master_moves_to_the_next_host(
    sim_cluster_factory, tmp_path: Path, assert_no_orphans, record_property
) -> None:
    cluster = sim_cluster_factory(3)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    process = _train(
        cluster, hosts, tmp_path / "ckpt.pt", "--max-restarts", "1", "--min-hosts", "2"
    )
    out, err, took = _crash_during_training(cluster, process, "node0")
    record_property("master_crash_to_resumed_training_s", took)
    assert process.returncode == 0, err[-3000:]
    masters = re.findall(r"job \S+: \d host\(s\), world size \d, master (\S+):\d+", err)
    assert len(masters) == 2 and masters[0] != masters[1], err[-3000:]
    assert masters[1] == cluster.host("node1").addr
    assert "node0 dropped; 2 host(s), world size 2 (ranks re-planned)" in err
    after = rank_lines(out.split("resuming from")[-1])
    assert {host for rank, host, _, _ in after if rank == 0} == {"node1"}
    assert_no_orphans(cluster, timeout=5.0)


@two_trainings  # three torchrun starts: 45 s here, far more when the machine is loaded
def test_a_rank_that_fails_every_time_runs_n_plus_1_attempts(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    argv = (*FAST, "--max-restarts", "2", str(hosts), "flaky.py")
    result = run_cli("run", sim_cluster, *argv, timeout=450)
    assert result.returncode == 7, result.stderr[-3000:]
    starts = [text for rank, _, _, text in rank_lines(result.stdout) if rank == 1]
    assert starts == [f"rank 1 restart {n} world 2 up" for n in range(3)]
    assert result.stderr.count("job failed: rank 1 on node1 exited with code 7") == 3
    assert "restart 2 of 2 in 1 s" in result.stderr  # 0.5 s, doubled
    assert "restart 3" not in result.stderr


@two_trainings
def test_every_attempt_writes_the_same_log_dir(sim_cluster, tmp_path: Path) -> None:
    """The log directory outlives each attempt: the first one's end closed it, and the
    restart that followed was a traceback (LogDir.open() first) instead of attempt 2."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    logs = tmp_path / "logs"
    argv = (*FAST, "--max-restarts", "2", "--log-dir", str(logs), str(hosts), "flaky.py")
    script = ("--fail-until", "1", "--sleep", "0", "--last-words", "no newline")
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not any(line.startswith("Traceback") for line in result.stderr.splitlines())
    said = (logs / "controller.log").read_text()
    assert "attempt 1 failed" in said and "job succeeded in attempt 2" in said
    # Each attempt's rank its own file, its bytes exactly: attempt 2's first line was glued
    # to an attempt-1 line that ended without a newline, with nothing between them.
    assert "attempt 2: each rank's output in rank-N.attempt-2.log" in said
    assert (logs / "rank-1.log").read_bytes() == b"rank 1 restart 0 world 2 up\nno newline"
    assert (logs / "rank-1.attempt-2.log").read_bytes() == b"rank 1 restart 1 world 2 up\n"
    assert (logs / "rank-0.attempt-2.log").read_bytes() == b"rank 0 restart 1 world 2 up\n"


@two_trainings
def test_a_spare_gets_the_synced_code_before_its_preflight(sim_cluster, tmp_path: Path) -> None:
    """--sync to a spare came after its preflight, which found no script there and dropped
    it: the job ended with too few hosts. And too few hosts ends the job, not a restart."""
    project, spare_dir, down = tmp_path / "project", tmp_path / "spare", tmp_path / "down"
    project.mkdir()
    shutil.copy(WORKERS / "flaky.py", project / "flaky.py")
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1, {"workdir": str(project)}),
            ("node1", 1, {"workdir": str(project), "setup": f"test ! -e {down}"}),
            ("node2", 1, {"workdir": str(spare_dir), "spare": True}),
        ],
    )
    argv = (*FAST, "--sync", "--max-restarts", "2", str(hosts), "flaky.py")
    script = ("--fail-until", "1", "--sleep", "0", "--touch", str(down))
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "job succeeded in attempt 2" in result.stderr
    assert (spare_dir / "flaky.py").is_file()


@two_trainings
def test_too_few_hosts_at_a_restart_ends_the_job(sim_cluster, tmp_path: Path) -> None:
    """It ended that attempt, and was restarted as a failed one until --max-restarts."""
    down = tmp_path / "down"
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": f"test ! -e {down}"})]
    )
    argv = (*FAST, "--max-restarts", "3", "--min-hosts", "2", str(hosts), "flaky.py")
    result = run_cli("run", sim_cluster, *argv, "--touch", str(down), timeout=450)
    assert result.returncode == 255, result.stderr[-3000:]
    assert result.stderr.count("only 1 usable host(s), --min-hosts is 2") == 1
    assert "restart 2" not in result.stderr


@two_trainings
def test_a_restart_that_makes_localhost_node0_names_its_entry_and_why(
    sim_cluster, tmp_path: Path
) -> None:
    """Dropping node0 made localhost the master, which it cannot be: the restart's error
    said hosts[0] (node0's field) at localhost's line. The dry run warns of it."""
    down = tmp_path / "down"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1, {"setup": f"test ! -e {down}"}), ("localhost", 1), ("node1", 1)],
    )
    argv = (*FAST, "--max-restarts", "1", "--min-hosts", "1", str(hosts), "flaky.py")
    plan = run_cli("run", sim_cluster, "--dry-run", *argv)
    assert plan.returncode == 0, plan.stderr
    assert (
        "# restarts: a restart without node0 makes localhost (line 7, no addr:) node 0, which "
        "cannot be the master of a multi-host job, and fails; set its addr:"
    ) in plan.stdout
    result = run_cli("run", sim_cluster, *argv, "--fail-rank", "0", "--touch", str(down))
    assert result.returncode == 7, result.stderr[-3000:]
    assert "restart 1: node0 failed the preflight, dropped: setup failed (exit 1)" in result.stderr
    assert (
        f"clusterlaunch: job failed: restart 1: {hosts}:7: hosts[1]: localhost is node 0, the "
        "master, as this restart leaves out node0, and localhost cannot be the master of a "
        "multi-host job; set its addr: (or master_addr:, or --master-addr) to an address the "
        "other hosts can reach\n"
    ) in result.stderr


@two_trainings
def test_ranks_past_a_shrunk_attempts_world_are_named_as_not_shown(
    sim_cluster, tmp_path: Path
) -> None:
    """--ranks 1 after node1 was dropped: attempt 2 has rank 0 alone, and showed nothing."""
    down = tmp_path / "down"
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": f"test ! -e {down}"})]
    )
    argv = (*FAST, "--max-restarts", "1", "--min-hosts", "1", "--ranks", "1", str(hosts))
    script = ("flaky.py", "--fail-until", "1", "--sleep", "0", "--touch", str(down))
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "[r1 node1:0] rank 1 restart 0 world 2 up\n"
    assert "clusterlaunch: attempt 2: --ranks 1 not shown: this attempt has rank(s) 0\n" in (
        result.stderr
    )


def _ended(process: subprocess.Popen[bytes], timeout: float) -> tuple[int, str]:
    """The controller's exit status and what is left of its stderr, once it ended."""
    code = process.wait(timeout=timeout)
    return code, process.stderr.read().decode() if process.stderr else ""


@contextlib.contextmanager
def _killed_if_left(process: subprocess.Popen[bytes]) -> Iterator[None]:
    """A failed assertion or a timeout leaves no controller running."""
    try:
        yield
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("when", ["backoff", "attempt"])
def test_ctrl_c_ends_the_job_and_every_restart(sim_cluster, tmp_path: Path, when: str) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    backoff = "30" if when == "backoff" else "0.5"
    job = f"ctrl-c-{when}"
    argv = ("--grace", "2", "--restart-backoff", backoff, "--max-restarts", "3", "--job-id", job)
    process = start_cli("run", sim_cluster, *argv, str(hosts), "flaky.py", "--fail-until", "1")
    with _killed_if_left(process):
        if when == "backoff":
            stderr_until(process, f"restart 1 of 3 in {backoff} s")
        else:  # the second attempt runs: every rank up and sleeping
            wait_for_lines(process, b"restart 1 world 2 up", 2, timeout=120)
            listed = run_cli("ps", sim_cluster, "--json", str(hosts))
            rows = [json.loads(line) for line in listed.stdout.splitlines()]
            assert sorted(r["attempt"] for r in rows if r["job_id"] == job) == [2, 2], listed
        process.send_signal(signal.SIGINT)
        code, err = _ended(process, 30)
    assert code == ExitStatus.INTERRUPTED, err[-3000:]
    assert "interrupted (Ctrl-C)" in err
    assert "restart 2" not in err and "attempt 3" not in err
    if when == "backoff":
        assert "attempt 2" not in err


def test_kill_during_the_backoff_cancels_the_restart(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    argv = ("--grace", "2", "--restart-backoff", "6", "--max-restarts", "3")
    job = ("--job-id", "kill-in-backoff")
    process = start_cli("run", sim_cluster, *argv, *job, str(hosts), "flaky.py")
    with _killed_if_left(process):
        stderr_until(process, "restart 1 of 3 in 6 s")
        killed = run_cli("kill", sim_cluster, str(hosts), "kill-in-backoff")
        assert killed.returncode == 1, killed.stderr  # nothing running at this moment
        assert "a job of that id still starting will not start" in killed.stderr
        code, err = _ended(process, 60)
    assert code == ExitStatus.KILLED, err[-3000:]
    assert "job stopped: the job was killed (clusterlaunch kill), before restart 1" in err
    assert "restart 1 world" not in (process.stdout.read().decode() if process.stdout else "")


@two_trainings
def test_timeout_ends_a_restart_stuck_in_its_setup_and_names_the_given_number(
    sim_cluster, tmp_path: Path
) -> None:
    """The restart's connect, setup and preflight ran unbounded by --timeout: a 60 s setup
    under --timeout 15 ended the job late, saying '--timeout 12.435 s reached'."""
    down = tmp_path / "down"
    slow = f"if [ -e {down} ]; then sleep 60; fi"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1, {"setup": slow})])
    argv = ("--grace", "2", "--restart-backoff", "0.2", "--max-restarts", "1", "--timeout", "15")
    began = time.monotonic()
    result = run_cli("run", sim_cluster, *argv, str(hosts), "flaky.py", "--touch", str(down))
    took = time.monotonic() - began
    if "restart 1 of 1" not in result.stderr:
        pytest.skip("the first attempt alone took --timeout (a loaded machine)")
    assert result.returncode == ExitStatus.TIMEOUT, result.stderr[-3000:]
    assert "job stopped: --timeout 15 s reached in the preflight of restart 1" in result.stderr
    assert took < 15 + 10, result.stderr[-3000:]  # not the setup's 60 s on top


@two_trainings
def test_a_gpus_auto_spare_with_fewer_ranks_names_ranks_not_shown(
    sim_cluster, tmp_path: Path
) -> None:
    """It was `error: --ranks: gpus: auto gave this job 2 rank(s)`, exit 2, after the job ran."""
    from tests.cluster.test_interface import fake_tools

    down = tmp_path / "down"
    nvidia = fake_tools(tmp_path / "nv", nvidia_smi="nvidia-smi.txt")
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1),
            ("node1", 2, {"setup": f"test ! -e {down}"}),
            ("node2", "auto", {"setup": nvidia, "devices": [0], "spare": True}),
        ],
    )
    argv = (*FAST, "--max-restarts", "1", "--ranks", "2", str(hosts), "flaky.py")
    script = ("--fail-until", "1", "--sleep", "0", "--touch", str(down))
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "attempt 2: --ranks 2 not shown: this attempt has rank(s) 0-1\n" in result.stderr
    assert "job succeeded in attempt 2" in result.stderr


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(WORKERS / "flaky.py", project / "flaky.py")
    return project


@two_trainings
def test_a_spare_whose_sync_fails_is_dropped_and_the_job_goes_on(
    sim_cluster, tmp_path: Path
) -> None:
    """It ended the job (255), its reason the sync's multi-line table in one 'line'."""
    project, down = _project(tmp_path), tmp_path / "down"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1, {"workdir": str(project)}),
            ("node1", 1, {"workdir": str(project), "setup": f"test ! -e {down}"}),
            ("node2", 1, {"workdir": "/proc/nope/x", "spare": True}),
        ],
    )
    argv = (*FAST, "--sync", "--max-restarts", "1", "--min-hosts", "1", str(hosts), "flaky.py")
    script = ("--fail-until", "1", "--sleep", "0", "--touch", str(down))
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450, cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    dropped = [line for line in result.stderr.splitlines() if "failed the sync" in line]
    assert len(dropped) == 1 and dropped[0].startswith(
        "clusterlaunch: restart 1: node2 failed the sync, dropped: "
    ), result.stderr[-3000:]
    assert "node1 dropped; 1 host(s), world size 1 (ranks re-planned)" in result.stderr
    assert "job succeeded in attempt 2" in result.stderr


@two_trainings
def test_a_sync_refused_at_a_restart_fails_the_job_not_as_bad_input(
    sim_cluster, tmp_path: Path
) -> None:
    """A file name that is not UTF-8, made during the back-off: it was `error: ...`, exit 2
    ('nothing was started'), and controller.log ended at 'restart 1 of 1 in 2 s'."""
    project, logs = _project(tmp_path), tmp_path / "logs"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1, {"workdir": str(project)}), ("node1", 1, {"workdir": str(project)})],
    )
    argv = ("--grace", "2", "--restart-backoff", "2", "--max-restarts", "1", "--sync")
    process = subprocess.Popen(
        cli_argv("run", sim_cluster, *argv, "--log-dir", str(logs), str(hosts), "flaky.py"),
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with _killed_if_left(process):
        stderr_until(process, "restart 1 of 1 in 2 s")
        os.close(os.open(bytes(project) + b"/bad-\xff", os.O_CREAT | os.O_WRONLY, 0o644))
        code, err = _ended(process, 60)
    assert code == 7, err[-3000:]  # the last attempt's
    failed = [line for line in err.splitlines() if line.startswith("clusterlaunch: job failed: ")]
    assert failed[-1].startswith("clusterlaunch: job failed: restart 1: "), err[-3000:]
    assert "is not UTF-8" in failed[-1] and "error:" not in err
    assert failed[-1].removeprefix("clusterlaunch: ") in (logs / "controller.log").read_text()


def test_a_later_attempts_log_file_already_there_is_refused_before_anything(
    sim_cluster, tmp_path: Path
) -> None:
    """Planted (or left by an earlier job) in the directory: the restart stopped at it
    (``cannot write ... (File exists)``, exit 1), after attempt 1 ran."""
    logs, started = tmp_path / "logs", tmp_path / "started"
    logs.mkdir()
    (logs / "rank-0.attempt-2.log").symlink_to(tmp_path / "elsewhere")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    argv = (*FAST, "--max-restarts", "1", "--log-dir", str(logs), str(hosts), "flaky.py")
    result = run_cli("run", sim_cluster, *argv, "--fail-rank", "0", "--touch", str(started))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"clusterlaunch: error: --log-dir {logs}: rank-0.attempt-2.log already exists (logs of "
        "an earlier job?); use a new directory, e.g. --log-dir logs/$(date +%Y%m%d-%H%M%S)\n"
    )
    assert not started.exists() and not (tmp_path / "elsewhere").exists()


@two_trainings
def test_a_later_attempts_log_file_made_during_the_job_stops_that_restart(
    sim_cluster, tmp_path: Path
) -> None:
    """Made by someone else in a shared directory while attempt 1 ran: the restart that
    needs the name does not start, said as any restart that cannot start, the last
    attempt's status (it was `cannot write ... (File exists)`, exit 1, not in the log)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o1777)  # sticky and open to all, as /tmp: accepted
    planted = logs / "rank-0.attempt-2.log"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    argv = (*FAST, "--max-restarts", "1", "--log-dir", str(logs), str(hosts), "flaky.py")
    script = ("--fail-rank", "0", "--sleep", "0", "--touch", str(planted))  # as if another did
    result = run_cli("run", sim_cluster, *argv, *script, timeout=450)
    assert result.returncode == 7, result.stderr[-3000:]  # attempt 1's: rank 0's code
    said = (
        f"job failed: restart 1: --log-dir {logs}: rank-0.attempt-2.log was created since the "
        "job started, by someone else who may write to the directory; use a directory only "
        "you can write to"
    )
    assert result.stderr.endswith(f"clusterlaunch: {said}\n"), result.stderr[-3000:]
    assert (logs / "controller.log").read_text().endswith(f" clusterlaunch: {said}\n")
    assert [text for *_, text in rank_lines(result.stdout)] == ["rank 0 restart 0 world 1 up"]
    assert planted.read_bytes() == b""  # not ours: left as it is
