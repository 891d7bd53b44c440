"""The command line's bad-input and ``--dry-run`` paths: they contact nothing."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core import commands
from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.core.model import SshTarget
from clusterlaunch.core.planner import JOB_ID_VAR
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.sshconfig import resolve_targets
from tests.unit.test_planner import setting

SSH_CONFIG = """\
Host a
 HostName 10.1.2.3
 Port 2201
 User alice

Host unreachable.invalid
 Port 2300
 User carol
"""
TWO_HOSTS = """\
hosts:
  - {host: a, gpus: 3}
  - {host: unreachable.invalid, gpus: 1, user: bob, port: 2222}
"""


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may resolve or dial anything."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network use in a unit test: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ssh_config").write_text(SSH_CONFIG)
    (tmp_path / "local.yaml").write_text("hosts:\n  - {host: localhost, gpus: 2}\n")
    (tmp_path / "two.yaml").write_text(TWO_HOSTS)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_usage_error(code: int, out: str, err: str, fragment: str) -> None:
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("clusterlaunch: error: "), err
    assert "Traceback" not in err
    assert fragment in lines[0], err


# ---------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["run", "--dry-run", "missing.yaml", "train.py"],
            "missing.yaml: no such file; pass the path",
        ),
        (
            ["run", "--dry-run", "--env", "FOO", "local.yaml", "train.py"],
            "--env: expected KEY=VALUE",
        ),
        (
            ["run", "--dry-run", "--env", "SSH_X=1", "local.yaml", "train.py"],
            "--env SSH_X=...: SSH_* variables",
        ),
        (
            ["run", "--dry-run", "--env", "RANK=1", "local.yaml", "train.py"],
            "--env RANK=...: RANK is set by torchrun",
        ),
        (
            ["run", "--dry-run", "--master-port", "0", "local.yaml", "train.py"],
            "--master-port 0: use auto or",
        ),
        (
            ["run", "--dry-run", "--master-port", "abc", "local.yaml", "train.py"],
            "--master-port abc: use auto",
        ),
        (
            ["run", "--dry-run", "--master-port", "65536", "local.yaml", "train.py"],
            "--master-port 65536",
        ),
        (["run", "--dry-run", "--master-port", "-1", "local.yaml", "train.py"], "--master-port"),
        (
            ["run", "--dry-run", "--torchrun-args", "--nnodes 3", "local.yaml", "train.py"],
            "(--nnodes)",
        ),
        (
            ["run", "--dry-run", "--torchrun-args=--master_port=1", "local.yaml", "train.py"],
            "(--master-port)",
        ),
        (
            ["run", "--dry-run", "--torchrun-args=--rdzv-backend c10d", "local.yaml", "train.py"],
            "(--rdzv-backend)",
        ),
        (
            ["run", "--dry-run", "--torchrun-args=--node 1", "local.yaml", "train.py"],
            "(--node-rank)",
        ),
        (
            ["run", "--dry-run", "--torchrun-args", '"unclosed', "local.yaml", "train.py"],
            "No closing quotation",
        ),
        (
            ["run", "--dry-run", "--ranks", "5-2", "local.yaml", "train.py"],
            "--ranks '5-2': range 5-2 runs backwards",
        ),
        (
            ["run", "--dry-run", "--ranks", "9", "local.yaml", "train.py"],
            "--ranks '9': the job has ranks 0-1 only",
        ),
        (["run", "--dry-run", "--ranks", "x", "local.yaml", "train.py"], "use ranks and ranges"),
        (["run", "local.yaml", "nope.py"], "nope.py: no such script here"),
        (["run", "--dry-run", "local.yaml", "--", "-s.py"], "write ./-s.py"),
        (["exec", "local.yaml"], "exec: give a command after --"),
        (["exec", "--dry-run", "local.yaml", "--"], "exec: give a command after --"),
        (
            ["run", "--dry-run", "--fanout", "0", "local.yaml", "train.py"],
            "--fanout '0': use a whole number of connections from 1 to 4,096",
        ),
        (
            ["run", "--dry-run", "--grace", "-1", "local.yaml", "train.py"],
            "--grace '-1': use a number of seconds from 0 to 3,600",
        ),
        (
            ["run", "--dry-run", "--heartbeat-timeout", "1", "local.yaml", "train.py"],
            "--heartbeat-timeout '1': use a number of seconds from 2 to 86,400",
        ),
        (
            ["run", "--dry-run", "--ssh-config", "nope", "two.yaml", "train.py"],
            "--ssh-config nope: no such file",
        ),
        (["run", "--dry-run", "--fanout", "x", "local.yaml", "train.py"], "--fanout 'x': use a"),
        (
            ["run", "--dry-run", "--host-key-policy", "yolo", "local.yaml", "train.py"],
            "invalid choice",
        ),
        (["run", "--dry-run"], "the following arguments are required"),
        (["bogus"], "invalid choice: 'bogus'"),
        ([], "the following arguments are required"),
    ],
)
def test_bad_input(
    work: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert_usage_error(*run(capsys, *argv), fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "hosts:\n  - {host: a, gpu: 2}\n",
            "bad.yaml:2: hosts[0].gpu: unknown key (did you mean 'gpus'?)",
        ),
        ("hosts: [\n", "bad.yaml:2: YAML syntax error"),
        ("", "bad.yaml: hosts: the file is empty"),
        ("gpu1 slot=2\n", "bad.yaml:1: unknown option 'slot' (did you mean 'slots'?)"),
        ("gpu1\ngpu03 slots 8\n", "bad.yaml:2: expected slots=N, got 'slots 8'"),
        (
            "hosts:\n  - {host: localhost, gpus: 1}\n  - {host: b, gpus: 1}\n",
            "hosts[0]: localhost cannot be the master of a multi-host job",
        ),
    ],
)
def test_bad_hosts_file(
    work: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str
) -> None:
    (work / "bad.yaml").write_text(text)
    assert_usage_error(
        *run(capsys, "run", "--dry-run", "--ssh-config", "ssh_config", "bad.yaml", "train.py"),
        fragment,
    )


@pytest.mark.parametrize("flag", [("--exclude", "a"), ("--include", "localhost@b")])
def test_a_localhost_made_node0_by_a_filter_is_named_with_the_filter(
    work: Path, capsys: pytest.CaptureFixture[str], flag: tuple[str, str]
) -> None:
    """It said hosts[0] (the field of a) with localhost's line, and not why."""
    hosts = (
        "hosts:\n  - {host: a, gpus: 1}\n  - {host: localhost, gpus: 1}\n  - {host: b, gpus: 1}\n"
    )
    (work / "h.yaml").write_text(hosts)
    argv = ("run", "--dry-run", "--ssh-config", "ssh_config", *flag, "h.yaml", "train.py")
    assert_usage_error(
        *run(capsys, *argv),
        f"h.yaml:3: hosts[1]: localhost is node 0, the master, as {' '.join(flag)} leaves out "
        "a, and localhost cannot be the master of a multi-host job; set its addr:",
    )


def test_bad_hosts_file_in_exec_and_check(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "bad.yaml").write_text("hosts:\n  - {host: a, gpus: 0}\n")
    assert_usage_error(
        *run(capsys, "exec", "bad.yaml", "--", "hostname"), "bad.yaml:2: hosts[0].gpus"
    )
    assert_usage_error(*run(capsys, "check", "bad.yaml"), "bad.yaml:2: hosts[0].gpus")


def test_missing_script_checked_before_any_connection(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real run (no --dry-run) against a host that does not exist: the script check comes first.
    (work / "far.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 1}\n")
    assert_usage_error(
        *run(capsys, "run", "--ssh-config", "ssh_config", "far.yaml", "missing.py"),
        "missing.py: no such script",
    )


@pytest.mark.parametrize(
    "torchrun_args",
    [
        "--max-restarts 3 --monitor-interval 1",
        "--max_restarts=3",
        "--role 'a b'",
        "--rdzv-id x",
        "--max-restarts 0 --monitor-interval 0.5 --shutdown-timeout 0",
        "--rdzv-conf timeout=900",  # clusterlaunch sets no --rdzv-conf: the user's to give
        "--rdzv_conf=timeout=5,join_timeout=3",
        "--max-nodes 2",  # no option of torch 2.13's: the preflight judges it, as a typo
    ],
)
def test_allowed_torchrun_args_pass(
    work: Path, capsys: pytest.CaptureFixture[str], torchrun_args: str
) -> None:
    code, out, err = run(
        capsys,
        "run",
        "--dry-run",
        "--json",
        "--job-id",
        "j1",
        f"--torchrun-args={torchrun_args}",
        "local.yaml",
        "train.py",
    )
    assert (code, err) == (0, "")
    command = json.loads(out)["nodes"][0]["command"]
    words = shlex.split(command)
    extra = shlex.split(torchrun_args)
    start = words.index("--log-dir") + 2
    assert words[start : start + len(extra) + 2] == [*extra, "--", "train.py"]


def test_python_option_with_equals_is_refused(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "run", "--dry-run", "--python", "/opt/a=b/python", "local.yaml", "train.py"
    )
    assert code == 2
    assert err.startswith("clusterlaunch: error: --python")


# ------------------------------------------------------------------------------------------ dry run


def agent_words(python: str, node_rank: int, first_rank: int) -> list[str]:
    return [
        *commands.bootstrap_argv(python, "agent", len(program_payload("agent")), site=False),
        "--job-id", "j1", "--node-rank", str(node_rank),
        "--grace", "5", "--heartbeat-timeout", "15",
        "--first-rank", str(first_rank), "--rank-files", "--nodes", "2",
    ]  # fmt: skip


def torchrun_words(node_rank: int, nproc: int, addr: str, port: str, *script: str) -> list[str]:
    return [
        "python3", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(nproc),
        "--node-rank", str(node_rank), "--rdzv-backend", "static", "--rdzv-id", "j1",
        "--master-addr", addr,
        "--master-port", port, "--redirects", "3",
        "--log-dir", "AUTO",
        "--", *script,
    ]  # fmt: skip


def test_dry_run_text(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "hosts.yaml").write_text("master_port: 29500\n" + TWO_HOSTS)
    code, out, err = run(
        capsys,
        "run",
        "--dry-run",
        "--ssh-config",
        "ssh_config",
        "--job-id",
        "j1",
        "hosts.yaml",
        "train.py",
        "--lr",
        "3e-4",
    )
    assert (code, err) == (0, "")
    lines = out.split("\n")
    cwd = str(work)
    assert lines[:5] == [
        "job j1: 2 host(s), world size 4, master 10.1.2.3:29500",
        "",
        "node  host                 addr                 nproc  ranks  workdir",
        f"0     a                    10.1.2.3             3      0-2    {cwd}",
        f"1     unreachable.invalid  unreachable.invalid  1      3      {cwd}",
    ]
    assert lines[5:7] == ["", "# node 0 (a):"]
    assert lines[8:10] == ["", "# node 1 (unreachable.invalid):"]
    assert lines[11:] == ["", ""]
    env = setting({JOB_ID_VAR: "j1"})
    # The agent's preflight words as run starts it; the nonce each preflight draws is AUTO.
    checks = ["--master-addr", "10.1.2.3", "--nonce", "AUTO", "--timeout", "5"]
    wait = ["--script", "train.py", "--need-torch", "--preflight-timeout", "120"]
    assert shlex.split(lines[7]) == [
        "cd", "--", cwd, "&&", *env, *agent_words("python3", 0, 0),
        *checks, "--listen", "29500", *wait, "--",
        *torchrun_words(0, 3, "10.1.2.3", "29500", "train.py", "--lr", "3e-4"),
    ]  # fmt: skip
    assert shlex.split(lines[10]) == [
        "cd", "--", cwd, "&&", *env, *agent_words("python3", 1, 3), *checks, *wait,
        "--", *torchrun_words(1, 1, "10.1.2.3", "29500", "train.py", "--lr", "3e-4"),
    ]  # fmt: skip


def test_dry_run_text_auto_port_note(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "run", "--dry-run", "--job-id", "j1", "local.yaml", "train.py")
    assert code == 0
    assert out.splitlines()[0] == (
        "job j1: 1 host(s), world size 2, master 127.0.0.1:AUTO"
        " (auto: a free port is chosen on node 0 at launch)"
    )


def test_dry_run_json(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "run", "--dry-run", "--json", "--ssh-config", "ssh_config", "--job-id", "j1",
        "--env", "NCCL_DEBUG=INFO", "two.yaml", "train.py", "--dry-run", "--json", "-h", "--", "x",
    )  # fmt: skip
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert list(data) == ["job_id", "world_size", "master_addr", "master_port", "notes", "nodes"]
    assert (data["job_id"], data["world_size"], data["master_addr"], data["master_port"]) == (
        "j1",
        4,
        "10.1.2.3",
        "auto",
    )
    script = ["train.py", "--dry-run", "--json", "-h", "--", "x"]
    env = {"NCCL_DEBUG": "INFO", JOB_ID_VAR: "j1"}
    cwd = str(work)
    expected = [
        (0, "a", "10.1.2.3", 3, [0, 1, 2]),
        (1, "unreachable.invalid", "unreachable.invalid", 1, [3]),
    ]
    assert len(data["nodes"]) == 2
    for node, (rank, host, addr, nproc, ranks) in zip(data["nodes"], expected, strict=True):
        assert list(node) == [
            "node_rank",
            "host",
            "addr",
            "nproc",
            "global_ranks",
            "devices",
            "accelerator",
            "env",
            "command",
        ]
        got = (node["node_rank"], node["host"], node["addr"], node["nproc"], node["global_ranks"])
        assert got == (rank, host, addr, nproc, ranks)
        assert node["env"] == env
        checks = ["--master-addr", "10.1.2.3", "--nonce", "AUTO", "--timeout", "5"]
        checks += ["--listen", "0"] if rank == 0 else []  # auto: a free port
        checks += ["--script", "train.py", "--need-torch", "--preflight-timeout", "120"]
        assert shlex.split(node["command"]) == [
            "cd", "--", cwd, "&&", *setting(env),
            *agent_words("python3", rank, ranks[0]), *checks, "--",
            *torchrun_words(rank, nproc, "10.1.2.3", commands.AUTO_PORT, *script),
        ]  # fmt: skip


def test_dry_run_json_port_from_file_and_command_line(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "hosts.yaml").write_text("master_port: 29500\nhosts:\n  - {host: localhost, gpus: 1}\n")
    base = ["run", "--dry-run", "--json", "hosts.yaml", "train.py"]
    assert json.loads(run(capsys, *base)[1])["master_port"] == 29500
    assert (
        json.loads(run(capsys, "run", "--master-port", "1234", *base[1:])[1])["master_port"] == 1234
    )
    assert (
        json.loads(run(capsys, "run", "--master-port", "auto", *base[1:])[1])["master_port"]
        == "auto"
    )


def test_dry_run_json_says_what_gpus_auto_leaves_open_as_the_text_does(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "auto.yaml").write_text("hosts:\n  - {host: localhost, gpus: auto}\n")
    code, text, _ = run(capsys, "run", "--dry-run", "auto.yaml", "train.py")
    assert code == 0
    said = [line.removeprefix("# ") for line in text.splitlines() if line.startswith("# gpus")]
    code, out, _ = run(capsys, "run", "--dry-run", "--json", "auto.yaml", "train.py")
    assert code == 0 and said
    assert json.loads(out)["notes"] == said


def test_dry_run_script_args_double_dash(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "run", "--dry-run", "--json", "local.yaml", "train.py", "--", "--lr", "1"
    )
    assert code == 0
    words = shlex.split(json.loads(out)["nodes"][0]["command"])
    # Everything after SCRIPT is the script's, "--" included, on every Python.
    assert words[-4:] == ["train.py", "--", "--lr", "1"]


def test_dry_run_exec(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "exec",
        "--dry-run",
        "--ssh-config",
        "ssh_config",
        "--job-id",
        "j1",
        "two.yaml",
        "--",
        "sh",
        "-c",
        "echo $X",
    )
    assert (code, err) == (0, "")
    commands_ = [line for line in out.splitlines() if line.startswith("cd -- ")]
    assert len(commands_) == 2
    for command in commands_:
        assert shlex.split(command)[-4:] == ["--", "sh", "-c", "echo $X"]
        assert "torch.distributed.run" not in command
    # One command a host: no world size, master port or ranks, which exec has none of.
    assert out.startswith("job j1: 2 host(s), one command each\n")
    assert out.splitlines()[2].split() == ["node", "host", "addr", "workdir"]


def test_dry_run_workdir_python_and_env(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "run", "--dry-run", "--json", "--job-id", "j1",
        "--workdir", "/srv/my job", "--python", "/opt/py 3/python",
        "--env", "A=x y", "--env", "A=z", "--forward-env", "CL_TEST_*", "local.yaml", "train.py",
    )  # fmt: skip
    assert code == 0
    node = json.loads(out)["nodes"][0]
    assert node["env"] == {"A": "z", JOB_ID_VAR: "j1"}
    words = shlex.split(node["command"])
    assert words[:3] == ["cd", "--", "/srv/my job"]
    assert words[words.index("--", 3) + 1] == "/opt/py 3/python"


def test_dry_run_forward_env(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CL_TEST_A", "1 2")
    monkeypatch.setenv("SSH_CL_TEST", "no")
    path = "/custom/bin:/usr/bin"
    monkeypatch.setenv("PATH", path)
    code, out, _ = run(
        capsys,
        "run",
        "--dry-run",
        "--json",
        "--job-id",
        "j1",
        "--forward-env",
        "*",
        "local.yaml",
        "train.py",
    )
    assert code == 0
    env = json.loads(out)["nodes"][0]["env"]
    assert env["CL_TEST_A"] == "1 2"
    assert "SSH_CL_TEST" not in env and "PATH" not in env
    code, out, _ = run(
        capsys,
        "run",
        "--dry-run",
        "--json",
        "--job-id",
        "j1",
        "--forward-env",
        "PATH",
        "local.yaml",
        "train.py",
    )
    assert json.loads(out)["nodes"][0]["env"] == {"PATH": path, JOB_ID_VAR: "j1"}


def test_dry_run_generates_job_id(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "run", "--dry-run", "--json", "local.yaml", "train.py")
    assert code == 0
    job_id = json.loads(out)["job_id"]
    assert job_id.startswith("cl-")
    assert json.loads(out)["nodes"][0]["env"][JOB_ID_VAR] == job_id


def test_dry_run_mpi_hostfile_and_missing_script_is_fine(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "hostfile").write_text("localhost slots=2\n")
    code, out, _ = run(capsys, "run", "--dry-run", "--json", "hostfile", "not-here.py")
    assert code == 0
    assert json.loads(out)["world_size"] == 2


# ---------------------------------------------------------------------------- ssh config resolution


def test_ssh_config_hostname_is_master_and_hosts_file_wins(work: Path) -> None:
    inventory = load_inventory(str(work / "two.yaml"))
    targets = resolve_targets(str(work / "ssh_config"), inventory.hosts)
    assert [(t.alias, t.hostname, t.port, t.user) for t in targets] == [
        ("a", "10.1.2.3", 2201, "alice"),
        ("unreachable.invalid", "unreachable.invalid", 2222, "bob"),
    ]
    assert not targets[0].is_local
    assert targets[0].label == "a"


def test_ssh_config_localhost_is_local(work: Path) -> None:
    inventory = load_inventory(str(work / "local.yaml"))
    assert resolve_targets(str(work / "ssh_config"), inventory.hosts) == [
        SshTarget(alias="localhost", hostname="localhost", port=0)
    ]


_SCRIPT_EXIT = """
import atexit, sys, threading, time
from clusterlaunch.cli import main as cli

def fake_main():
    sys.stdout.write("buffered;")  # a pipe: block-buffered, so only a flush delivers it
    # Not a daemon: Python would wait for it. Its 50 ms are ages against the
    # microseconds from main's return to os._exit, which would cut it off unjoined.
    late = lambda: (time.sleep(0.05), sys.stdout.write("thread;"))
    threading.Thread(target=late).start()
    return 7

atexit.register(lambda: sys.stdout.write("atexit;"))
cli.main = fake_main
if sys.argv[1] == "traced":
    sys.settrace(lambda *args: None)
cli.script()
"""


@pytest.mark.parametrize("how", ["plain", "traced"])
def test_the_program_exits_as_python_would_only_sooner(how: str) -> None:
    # script() skips the interpreter's teardown (os._exit), so it must do first
    # what that teardown would have done: wait for threads, run atexit, flush.
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT_EXIT, how], capture_output=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (7, b"buffered;thread;atexit;", b"")
