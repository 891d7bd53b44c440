"""The launch interface on simulated hosts: -m, --no-python, gpus: auto, the job header, env files.

Every test runs the real CLI against real sshd hosts (fixtures in tests/conftest.py);
accelerators are fake tools on the hosts' PATH printing recorded output
(tests/unit/data/accel/), since the simulated hosts have none.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.testing import find_processes
from tests.binaries import foreign_elf, foreign_elf_runs_here
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

ACCEL_DATA = Path(__file__).resolve().parents[1] / "unit" / "data" / "accel"


def _outcome(result: Any) -> tuple[int, list[tuple[int, str, int]], str]:
    lines = rank_lines(result.stdout)
    ranks = sorted((rank, host, local) for rank, host, local, _ in lines)
    summary = [line for line in result.stderr.splitlines() if "job failed" in line]
    return result.returncode, ranks, summary[0] if summary else ""


def test_module_and_program_run_like_a_script(sim_cluster, tmp_path: Path) -> None:
    """Same ranks, prefixes, arguments and exit code whether SCRIPT is a file, -m or --no-python."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2)])
    common = ["--env", "FAIL_RANK=2", "--env", "FAIL_CODE=7", "--env", f"WORKER_PYTHON={PYTHON}"]
    kinds = {
        "script": [str(hosts), "allreduce.py"],
        "module": ["-m", str(hosts), "clpkg.train"],
        "program": ["--no-python", str(hosts), "./run_allreduce.sh"],
    }
    runs = {
        kind: run_cli("run", sim_cluster, *common, *words, "--lr", "1")
        for kind, words in kinds.items()
    }
    expected = (
        7,
        [(0, "node0", 0), (1, "node1", 0), (2, "node1", 1)],
        "clusterlaunch: job failed: rank 2 on node1 exited with code 7",
    )
    for kind, result in runs.items():
        assert _outcome(result) == expected, (kind, result.stderr)
        for rank, _, _, text in rank_lines(result.stdout):
            assert f"RANK={rank} " in text and "SUM=6" in text, (kind, text)
            assert json.loads(text.split("ARGV=", 1)[1]) == ["--lr", "1"], (kind, text)


def test_a_double_dash_after_script_reaches_it_as_typed(sim_cluster, tmp_path: Path) -> None:
    """``SCRIPT -- --lr 1``: torchrun's parser dropped a ``--`` right after the script; on
    node 0 and on node 1 (started through the store-wait program), for each kind of SCRIPT."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    given = ["--", "--lr", "1", "--", "--", "-m", "x"]
    kinds = {
        "script": [str(hosts), "allreduce.py"],
        "module": ["-m", str(hosts), "clpkg.train"],
        "program": ["--no-python", str(hosts), "./run_allreduce.sh"],
    }
    for kind, words in kinds.items():
        result = run_cli("run", sim_cluster, "--env", f"WORKER_PYTHON={PYTHON}", *words, *given)
        assert result.returncode == 0, (kind, result.stderr)
        lines = rank_lines(result.stdout)
        assert sorted(host for _, host, _, _ in lines) == ["node0", "node1"], (kind, lines)
        for *_, text in lines:
            assert json.loads(text.split("ARGV=", 1)[1]) == given, (kind, text)


def test_rdzv_conf_is_the_users_to_give(sim_cluster, tmp_path: Path) -> None:
    """clusterlaunch passes no --rdzv-conf, so it reaches torchrun (the static
    rendezvous reads its timeout); it was refused as clusterlaunch's own."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    extra = "--torchrun-args=--rdzv-conf timeout=900 --max-restarts 0"
    result = run_cli("run", sim_cluster, extra, str(hosts), "allreduce.py")
    assert result.returncode == 0, result.stderr
    assert sorted(rank for rank, *_ in rank_lines(result.stdout)) == [0, 1]


def test_the_preflight_checks_the_module_and_the_program(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("run", sim_cluster, "-m", str(hosts), "clpkg.nope")
    assert result.returncode == 2, result.stderr
    assert "preflight failed on 2 host(s); nothing was started" in result.stderr
    assert result.stderr.count("no module 'clpkg.nope' for ") == 2
    assert rank_lines(result.stdout) == []
    result = run_cli("run", sim_cluster, "--no-python", str(hosts), "no-such-program")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("program 'no-such-program' not found in PATH") == 2


def test_what_site_and_a_module_print_before_the_job_is_host_output(
    sim_cluster, tmp_path: Path
) -> None:
    """A sitecustomize.py that prints (the preflight's site.main() runs it) and a package
    whose __init__ prints or needs torchrun's environment. The agent wrote the prints into
    its channel: a job that succeeded was "host node1 was lost" (255), and check -m said
    "garbled probe output"; the module check ran the __init__, which refused the job
    (KeyError: 'LOCAL_RANK')."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text("print('site: ' + 'x' * 10000)\n")
    (tmp_path / "chatty").mkdir()
    init = "import os\nprint('chatty: loading config')\nRANK = int(os.environ['LOCAL_RANK'])\n"
    (tmp_path / "chatty" / "__init__.py").write_text(init)
    shutil.copy(WORKERS / "allreduce.py", tmp_path / "chatty" / "train.py")
    setup = {"setup": f"export PYTHONPATH={tmp_path / 'site'}:{WORKERS}"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, setup), ("node1", 1, setup)])
    result = run_cli("check", sim_cluster, "-m", str(hosts), "chatty.train", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    result = run_cli("run", sim_cluster, "-m", str(hosts), "chatty.train", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summed = [rank for rank, _, _, text in rank_lines(result.stdout) if "SUM=3 " in text]
    assert sorted(summed) == [0, 1], result.stdout[-2000:]
    assert "garbled" not in result.stderr and "lost" not in result.stderr


def test_a_directory_and_a_zipapp_run_like_a_script(sim_cluster, tmp_path: Path) -> None:
    """``python DIR`` runs DIR/__main__.py and ``python app.pyz`` the archive: torchrun does,
    so neither the local check nor the hosts' preflight may refuse them."""
    import zipapp

    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text(
        f"import runpy, sys\nsys.path.insert(0, {str(WORKERS)!r})\n"
        f"runpy.run_path({str(WORKERS / 'allreduce.py')!r}, run_name='__main__')\n"
    )
    zipapp.create_archive(app, tmp_path / "app.pyz")
    (tmp_path / "empty").mkdir()
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2)])
    for script in (app, tmp_path / "app.pyz"):
        result = run_cli("run", sim_cluster, str(hosts), str(script), "--lr", "1")
        assert _outcome(result) == (0, [(0, "node0", 0), (1, "node1", 0), (2, "node1", 1)], "")
        assert all("SUM=6" in text for *_, text in rank_lines(result.stdout)), result.stdout
    # Another workdir: only the hosts' preflight can tell, and refuses on every host.
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(tmp_path)})])
    result = run_cli("run", sim_cluster, str(hosts), "empty")
    assert result.returncode == 2, result.stderr
    assert "is a directory without __main__.py" in result.stderr
    assert rank_lines(result.stdout) == []


def show_env(result: Any) -> dict[int, dict[str, str | None]]:
    found = {}
    for rank, _, _, text in rank_lines(result.stdout):
        found[rank] = json.loads(text.split("ENV=", 1)[1])
    return found


def test_header_run_id_and_env_file(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    hostile = "$(touch /tmp/clusterlaunch-pwned) 'q' \"d\" ; x"
    (tmp_path / "vars.env").write_text(f"# from a file\nFROM_ENV_FILE={hostile}\n")
    logs = tmp_path / "logs"
    argv = ["--job-id", "iface-1", "--log-dir", str(logs), "--env-file", str(tmp_path / "vars.env")]
    result = run_cli("run", sim_cluster, *argv, str(hosts), "show_env.py")
    assert result.returncode == 0, result.stderr
    header = [line for line in result.stderr.splitlines() if line.startswith("clusterlaunch: job ")]
    assert len(header) == 1
    assert header[0].startswith("clusterlaunch: job iface-1: 2 host(s), world size 2, master ")
    port = int(header[0].rsplit(":", 1)[1])  # master_port auto: the port node 0 bound
    assert 1 <= port <= 65535
    assert header[0][len("clusterlaunch: ") :] in (logs / "controller.log").read_text()
    env = show_env(result)
    assert sorted(env) == [0, 1]
    for values in env.values():
        assert values["TORCHELASTIC_RUN_ID"] == "iface-1" == values["CLUSTERLAUNCH_JOB_ID"]
        assert values["FROM_ENV_FILE"] == hostile
    assert not Path("/tmp/clusterlaunch-pwned").exists()
    mine = run_cli("run", sim_cluster, "--torchrun-args=--rdzv-id mine", str(hosts), "show_env.py")
    assert mine.returncode == 0, mine.stderr
    assert {values["TORCHELASTIC_RUN_ID"] for values in show_env(mine).values()} == {"mine"}


def fake_tools(directory: Path, **samples: str) -> str:
    """``setup:`` that puts fake device tools (printing recorded output) first on the PATH."""
    directory.mkdir()
    for tool, sample in samples.items():
        path = directory / tool.replace("_", "-")
        path.write_text(f"#!/bin/sh\nexec {shutil.which('cat')} {ACCEL_DATA / sample}\n")
        path.chmod(0o755)
    return f'export PATH="{directory}:$PATH"'


def test_gpus_auto_and_the_detected_accelerator(sim_cluster, tmp_path: Path) -> None:
    nvidia = fake_tools(tmp_path / "nv", nvidia_smi="nvidia-smi.txt")  # 4 GPUs
    ascend = fake_tools(tmp_path / "npu", npu_smi="npu-smi-two-die.txt")  # logic IDs 0-3
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", "auto", {"setup": nvidia}),
            ("node1", "auto", {"setup": ascend, "devices": [2, 3]}),
        ],
    )
    dry = run_cli("run", sim_cluster, "--dry-run", str(hosts), "show_env.py")
    assert "world size auto" in dry.stdout and "resolved at launch" in dry.stdout
    argv = ["--include", "node0:1,3@node1", str(hosts), "show_env.py"]
    result = run_cli("run", sim_cluster, "--job-id", "iface-2", *argv)
    assert result.returncode == 0, result.stderr
    assert "clusterlaunch: job iface-2: 2 host(s), world size 4, master " in result.stderr
    env = show_env(result)
    assert sorted(env) == [0, 1, 2, 3]
    node0 = {env[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)}
    node1 = {env[r]["ASCEND_RT_VISIBLE_DEVICES"] for r in (2, 3)}
    assert (node0, node1) == ({"1,3"}, {"2,3"})
    assert env[2]["CUDA_VISIBLE_DEVICES"] is None  # detected npu: its own variable only
    result = run_cli("run", sim_cluster, "--gpus-per-host", "auto", str(hosts), "show_env.py")
    assert result.returncode == 0, result.stderr
    env = show_env(result)
    assert [env[rank]["LOCAL_WORLD_SIZE"] for rank in sorted(env)] == ["4"] * 4 + ["2"] * 2


def test_gpus_auto_on_a_host_without_devices_names_it(sim_cluster, tmp_path: Path) -> None:
    nvidia = fake_tools(tmp_path / "nv", nvidia_smi="nvidia-smi.txt")
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("node0", "auto", {"setup": nvidia}), ("node1", "auto")]
    )
    result = run_cli("run", sim_cluster, str(hosts), "show_env.py")
    assert result.returncode == 2, result.stderr
    assert "preflight failed on 1 host(s); nothing was started" in result.stderr
    problem = [line for line in result.stderr.splitlines() if "gpus: auto, but" in line]
    assert len(problem) == 1 and problem[0].split()[1] == "node1", result.stderr
    assert "no nvidia-smi, amd-smi, rocm-smi or npu-smi found on this host" in problem[0]
    assert rank_lines(result.stdout) == []


def test_workers_dir_has_the_fixtures() -> None:
    assert (WORKERS / "run_allreduce.sh").stat().st_mode & 0o111
    assert (WORKERS / "clpkg" / "train.py").is_file()


def test_a_program_torchrun_cannot_start_is_refused_by_check_and_run(
    sim_cluster, tmp_path: Path
) -> None:
    """torchrun starts a --no-python program without a shell: a file without a #! line (or
    with a missing interpreter), a binary built for another machine or not a program at all
    failed on every rank with a traceback; the preflight says so.
    check takes its options between HOSTS and SCRIPT, as run does."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    programs = {"plain": b"echo ran\n", "bad": b"#!/nonexistent/interp\n", "good": b"#!/bin/sh\n"}
    programs.update({"foreign": foreign_elf(), "data": b"PK\x03\x04\0\0"})
    for name, data in programs.items():
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o755)
    refusals = [("plain", "has no #! line"), ("bad", "'/nonexistent/interp' is not")]
    refusals.append(("data", "is a binary file but not an ELF program (Exec format error)"))
    if not foreign_elf_runs_here():  # else qemu-user's binfmt_misc handler runs it
        refusals.append(("foreign", "is built for 64-bit "))
    for command in ("check", "run"):
        for name, said in refusals:
            result = run_cli(command, sim_cluster, str(hosts), "--no-python", str(tmp_path / name))
            shown = result.stdout + result.stderr  # check: its table on stdout
            assert result.returncode == 2, shown
            if command == "run":
                assert "preflight failed on 2 host(s); nothing was started" in shown
            assert shown.count(said) == 2 and "Traceback" not in shown
    result = run_cli("check", sim_cluster, str(hosts), "--env", "X=1", "--no-python", "./good")
    assert result.returncode == 2 and "program './good' not found in" in result.stdout
    ok = run_cli("check", sim_cluster, str(hosts), "--no-python", str(tmp_path / "good"))
    assert ok.returncode == 0, ok.stderr


def _agent_words(command: str) -> list[str]:
    """The words the host's shell ``exec``s (the agent's argv) in a dry run's ``command``."""
    words = shlex.split(command)
    # exec /bin/sh -c SCRIPT sh ARGV: the /bin/sh that sets the variables (envhandoff.py)
    at = max(i for i in range(len(words) - 2) if words[i : i + 3] == ["exec", "/bin/sh", "-c"])
    return words[at + 5 :]


def _running_agents(cluster: Any, job_id: str) -> dict[str, list[str]]:
    """Each host's agent of ``job_id`` (by its --node-rank): its argv from /proc/PID/cmdline."""
    found = {}
    for process in find_processes(cluster.markers()):
        try:
            words = Path(f"/proc/{process.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:  # gone meanwhile
            continue
        argv = [word.decode() for word in words]
        if argv[1:3] == ["-S", "-c"] and argv[argv.index("--job-id") + 1] == job_id:
            found[argv[argv.index("--node-rank") + 1]] = argv
    return found


def test_the_dry_run_shows_the_words_each_agent_runs_with(
    sim_cluster, tmp_path: Path, assert_no_orphans: Any
) -> None:
    """The plan's commands lacked the preflight's words (--master-addr, --nonce, --timeout,
    --listen, --script, --need-torch, --preflight-timeout): copied to a host, they ran an
    agent without a preflight. Only the nonce differs: each preflight draws its own."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 2, {"setup": "true"})])
    argv = ("--job-id", "dry-words", "--setup-timeout", "20", str(hosts), "sleeper.py")
    plan = run_cli("run", sim_cluster, "--dry-run", "--json", *argv)
    assert plan.returncode == 0, plan.stderr
    planned = {
        str(n["node_rank"]): _agent_words(n["command"]) for n in json.loads(plan.stdout)["nodes"]
    }
    process = start_cli("run", sim_cluster, *argv)
    try:
        wait_for_lines(process, b" up", 3, timeout=120)
        running = _running_agents(sim_cluster, "dry-words")
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    assert sorted(running) == ["0", "1"], running
    for rank, words in running.items():
        nonce = words.index("--nonce") + 1
        assert len(words[nonce]) == 16 and planned[rank][nonce] == "AUTO"
        assert (
            words[:nonce] + words[nonce + 1 :] == planned[rank][:nonce] + planned[rank][nonce + 1 :]
        )
    assert "--preflight-timeout" in planned["0"] and "--listen" in planned["0"]
    assert_no_orphans(sim_cluster)
