"""Quoting: every command that reaches a remote shell splits back into exactly the argv meant.

Besides ``shlex.split``, commands are run through a real local ``/bin/sh -c`` and
``bash -c`` (a local subprocess, no SSH) to prove the bytes arrive unchanged.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.core import commands, envhandoff
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.planner import JOB_ID_VAR, plan_job
from clusterlaunch.core.setupguard import SetupGuard, SetupWatch, guarded

HOSTILE = [
    "plain",
    "with space",
    "  leading and trailing  ",
    "it's",
    'say "hi"',
    "'",
    '"',
    "$(touch pwned)",
    "`touch pwned`",
    "${IFS}$HOME",
    "a;b",
    "a && b",
    "a || b",
    "a|b",
    "a>pwned",
    "<in",
    "line1\nline2",
    "\n",
    "tab\there",
    "cr\rhere",
    "*",
    "?",
    "[a-z]",
    "~",
    "~/x",
    "back\\slash",
    "\\",
    "!",
    "#not-a-comment",
    "é",
    "日本語",
    "🚀 emoji",
    "",
    "-n",
    "-e",
    "--flag=value",
    "-",
    "--",
    "a=b",
    "%s%d",
    "{a,b}",
    "\x1b[31mred\x1b[0m",
]

SHELLS = [sh for sh in ("/bin/sh", "bash", "zsh", "ksh") if shutil.which(sh)]

DUMP_CODE = (
    "import json, os, sys; "
    "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
    "'env': {k: v for k, v in os.environ.items() "
    "if k.startswith(('HK', 'CLUSTERLAUNCH', 'FROM_'))}}))"
)


def child_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8", "PYTHONUTF8": "1"}


def without_setup_reports(stdout: bytes) -> bytes:
    """The program's own stdout: a setup's shell reports its PID and its end first."""
    watch = SetupWatch("h", expected=True)
    rest = watch.feed(stdout)
    assert watch.pid is not None and watch.done
    return rest


def run_shell(shell: str, command: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [shell, "-c", command],
        cwd=cwd,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=20,
        check=False,
    )


# ------------------------------------------------------------------------------------- pure quoting


@pytest.mark.parametrize("word", HOSTILE)
def test_quote_argv_round_trips_each_word(word: str) -> None:
    assert shlex.split(commands.quote_argv(["cmd", word, "end"])) == ["cmd", word, "end"]


def test_quote_argv_round_trips_all_words() -> None:
    assert shlex.split(commands.quote_argv(HOSTILE)) == HOSTILE
    assert commands.quote_argv([]) == ""


def test_shell_command_shapes() -> None:
    assert commands.shell_command(None, None, {}, ["echo", "hi"]) == "exec echo hi"
    guard = SetupGuard(30)
    assert (
        commands.shell_command("/w", "  source a.sh  \n", {"A": "1"}, ["echo"], guard)
        == f"cd -- /w && {guarded('  source a.sh  ', guard)} && export __cl_A=1 && exec /bin/sh "
        """-c 'export A="$__cl_A" && unset __cl_A && exec "$@"' sh echo"""
    )
    assert commands.shell_command("", "", {}, ["x"]) == "exec x"


@pytest.mark.parametrize("value", HOSTILE)
def test_shell_command_round_trip(value: str) -> None:
    command = commands.shell_command(
        value or "/w", None, {"HK": value, "HK2": "x"}, ["prog", value]
    )
    workdir = {"": "/w", "-": "./-"}.get(value, value)  # cd -- - would be cd "$OLDPWD"
    assert shlex.split(command) == [
        "cd", "--", workdir, "&&", "export", f"__cl_HK={value}", "__cl_HK2=x", "&&",
        "exec", "/bin/sh", "-c", envhandoff.renaming_script(["HK", "HK2"]), "sh", "prog", value,
    ]  # fmt: skip


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("env", [{}, {"HK": "a b"}], ids=["no variables", "variables"])
def test_a_shell_runs_the_words_as_given(shell: str, env: dict[str, str], tmp_path: Path) -> None:
    # A program named like an assignment runs, with variables too (env(1) took it for
    # one more assignment: it has no way to say "stop").
    name = "./A=1"
    program = tmp_path / name
    program.write_text('#!/bin/sh\nprintf "[%s]" "$HK" "$@"\n')
    program.chmod(0o755)
    command = commands.shell_command(str(tmp_path), None, env, [name, *HOSTILE])
    done = subprocess.run([shell, "-c", command], capture_output=True, check=True)
    shown = "".join(f"[{word}]" for word in [env.get("HK", ""), *HOSTILE])
    assert done.stdout.decode() == shown


def test_setup_is_inserted_as_shell_code() -> None:
    setup = "source '/opt/my env/bin/activate'; export X=$(hostname)"
    command = commands.shell_command("/w", setup, {}, ["prog"], SetupGuard(30))
    # As written, in a group closed on its own line, stdin closed, stdout to stderr.
    assert f"{{ {setup}\n}} </dev/null >&2;" in command
    assert command.startswith("cd -- /w && { ( trap")
    assert command.endswith("&& printf '@@setup@@ done\\n' && exec prog")


def test_tilde_in_workdir_and_python_is_left_to_the_host_shell() -> None:
    python = commands.HostPath("~/venv/bin/python")
    command = commands.shell_command(commands.HostPath("~/my proj"), None, {}, [python, "-V"])
    assert command == "cd -- ~/'my proj' && exec ~/venv/bin/python -V"
    assert commands.quote_argv(["~/not-a-host-path"]) == "'~/not-a-host-path'"


def test_bootstrap_and_torchrun_argv() -> None:
    boot = commands.bootstrap_argv("/py", "agent", 123)
    assert boot[:2] == ["/py", "-c"]
    assert "123" in boot[2] and '"clusterlaunch-agent"' in boot[2]
    compile(boot[2], "<bootstrap>", "exec")
    spec = commands.TorchrunSpec(
        python="py",
        nnodes=2,
        nproc=4,
        node_rank=1,
        master_addr="10.0.0.1",
        master_port=None,
        log_dir="/tmp/l",
        extra_args=("--max-restarts", "1"),
        script="t.py",
        script_args=("--", "-x"),
    )
    assert commands.torchrun_argv(spec) == [
        "py", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "4",
        "--node-rank", "1", "--rdzv-backend", "static", "--master-addr", "10.0.0.1",
        "--master-port", "AUTO", "--redirects", "3", "--log-dir", "/tmp/l",
        "--max-restarts", "1", "--", "t.py", "--", "-x",
    ]  # fmt: skip


def _hostile_plan(workdir: str, python: str, setup: str | None = None) -> tuple[object, list[str]]:
    inv = Inventory(
        path="hosts.yaml",
        hosts=(
            HostSpec(
                host="a",
                gpus=1,
                env={f"HK{i}": v for i, v in enumerate(HOSTILE)},
                workdir=workdir,
                setup=setup,
            ),
        ),
        master_port=29500,
    )
    options = LaunchOptions(
        script="train script.py",
        script_args=tuple(HOSTILE),
        env=(("HKCLI", "$(touch pwned) 'q' \"d\" é\n"),),
        python=python,
    )
    job = plan_job(
        inv,
        [SshTarget(alias="a", hostname="10.0.0.1")],
        options,
        job_id="j1",
        local_env={},
        local_cwd="/unused",
        agent_size=777,
    )
    node = job.nodes[0]
    expected_argv = [
        *commands.bootstrap_argv(python, "agent", 777, site=False),
        "--job-id", "j1", "--node-rank", "0", "--grace", "5", "--heartbeat-timeout", "15",
        "--first-rank", "0", "--rank-files", "--nodes", "1",
        "--",
        python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "1",
        "--node-rank", "0", "--rdzv-backend", "static", "--rdzv-id", "j1",
        "--master-addr", "10.0.0.1",
        "--master-port", "29500", "--redirects", "3", "--log-dir", "AUTO",
        "--", "train script.py", *HOSTILE,
    ]  # fmt: skip
    return node, expected_argv


def test_full_node_command_round_trip() -> None:
    workdir = "/srv/my job/$(touch pwned)/it's/日本"
    python = "/opt/my env/bin/python 3 'x' é"
    node, expected_argv = _hostile_plan(workdir, python)
    env = {f"HK{i}": v for i, v in enumerate(HOSTILE)}
    env |= {"HKCLI": "$(touch pwned) 'q' \"d\" é\n", JOB_ID_VAR: "j1"}
    assert shlex.split(node.command) == [  # type: ignore[attr-defined]
        "cd", "--", workdir, "&&", "export", *(f"__cl_{k}={v}" for k, v in env.items()), "&&",
        "exec", "/bin/sh", "-c", envhandoff.renaming_script(env), "sh", *expected_argv,
    ]  # fmt: skip


# ----------------------------------------------------------------------------- through a real shell


@pytest.mark.parametrize("shell", SHELLS)
def test_shell_delivers_exact_bytes(shell: str, tmp_path: Path) -> None:
    workdir = tmp_path / "work dir $(touch pwned) 'q' \"d\" é 日本"
    workdir.mkdir()
    env = {f"HK{i}": v for i, v in enumerate(HOSTILE)}
    command = commands.shell_command(
        str(workdir), None, env, [sys.executable, "-c", DUMP_CODE, *HOSTILE]
    )
    result = run_shell(shell, command, tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen == {"argv": HOSTILE, "cwd": str(workdir), "env": env}
    assert list(tmp_path.iterdir()) == [workdir]  # nothing named "pwned" appeared
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("shell", SHELLS)
def test_relative_workdir_starting_with_dash(shell: str, tmp_path: Path) -> None:
    (tmp_path / "-w $x").mkdir()
    command = commands.shell_command("-w $x", None, {}, [sys.executable, "-c", DUMP_CODE, "-"])
    result = run_shell(shell, command, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cwd"] == str(tmp_path / "-w $x")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_workdir_named_dash_is_that_folder(shell: str, tmp_path: Path) -> None:
    """``cd -- -`` is ``cd "$OLDPWD"`` ("OLDPWD not set": nothing ran), in the job's command
    and in --sync's: each cds to ``./-``."""
    token = ".clusterlaunch-sync-00ff-1"
    prepared = run_shell(shell, commands.sync_prepare_command("-", token), tmp_path)
    assert prepared.returncode == 0, prepared.stderr
    assert (tmp_path / "-" / token).is_file()
    listed = run_shell(shell, commands.sync_tokens_command("-", ".clusterlaunch-sync-"), tmp_path)
    assert listed.stdout.decode().splitlines() == [f"token={token}"]
    assert run_shell(shell, commands.sync_cleanup_command("-", token), tmp_path).returncode == 0
    assert list((tmp_path / "-").iterdir()) == []
    command = commands.shell_command("-", None, {}, [sys.executable, "-c", DUMP_CODE])
    result = run_shell(shell, command, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cwd"] == str(tmp_path / "-")


@pytest.mark.parametrize("shell", SHELLS)
def test_setup_runs_as_shell_code_before_the_program(shell: str, tmp_path: Path) -> None:
    setup = "export FROM_SETUP=\"$(echo set by setup)\"\nexport FROM_SETUP2='two'"
    command = commands.shell_command(
        str(tmp_path), setup, {"HK": "v"}, [sys.executable, "-c", DUMP_CODE]
    )
    result = run_shell(shell, command, tmp_path)
    assert result.returncode == 0, result.stderr
    watch = SetupWatch("h", expected=True)
    assert json.loads(watch.feed(result.stdout))["env"] == {
        "FROM_SETUP": "set by setup",
        "FROM_SETUP2": "two",
        "HK": "v",
        # The shell's PID and start time: the program it became finds the setup's
        # leftovers by it (remote/teardown.py's setup_marker).
        "CLUSTERLAUNCH_SETUP": f"{watch.pid}.{watch.start}",
    }


@pytest.mark.parametrize("shell", SHELLS)
def test_failing_cd_or_setup_stops_the_program(shell: str, tmp_path: Path) -> None:
    program = [sys.executable, "-c", "print('RAN')"]
    missing = commands.shell_command(str(tmp_path / "missing"), None, {}, program)
    result = run_shell(shell, missing, tmp_path)
    assert result.returncode != 0 and b"RAN" not in result.stdout
    failing_setup = commands.shell_command(str(tmp_path), "false", {}, program)
    result = run_shell(shell, failing_setup, tmp_path)
    assert result.returncode != 0 and b"RAN" not in result.stdout


def _dumper(directory: Path) -> Path:
    if " " in sys.executable:
        pytest.skip("interpreter path with a space cannot be a #! line")
    directory.mkdir(parents=True)
    path = directory / "fake python é"
    path.write_text(f"#!{sys.executable}\n{DUMP_CODE}\n", encoding="utf-8")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("shell", SHELLS)
def test_full_node_command_through_shell(shell: str, tmp_path: Path) -> None:
    """The exact NodePlan.command, with 'python' a program that prints what it got."""
    workdir = tmp_path / "job dir $(touch pwned) it's 日本"
    workdir.mkdir()
    python = str(_dumper(tmp_path / "bin dir 'q' $HOME"))
    node, expected_argv = _hostile_plan(str(workdir), python, setup="export FROM_SETUP=1")
    result = run_shell(shell, node.command, tmp_path)  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stderr
    watch = SetupWatch("h", expected=True)
    seen = json.loads(watch.feed(result.stdout))
    assert seen["argv"] == expected_argv[1:]
    assert seen["cwd"] == str(workdir)
    assert seen["env"] == {
        **{f"HK{i}": v for i, v in enumerate(HOSTILE)},
        "HKCLI": "$(touch pwned) 'q' \"d\" é\n",
        JOB_ID_VAR: "j1",
        "FROM_SETUP": "1",
        "CLUSTERLAUNCH_SETUP": f"{watch.pid}.{watch.start}",  # the agent keeps it from the job
    }
    assert not list(workdir.iterdir())


# --------------------------------------------------------------------------------------- known bugs


def _runs(shell: str, command: str, cwd: Path) -> bool:
    result = run_shell(shell, command, cwd)
    return b"RAN" in result.stdout


@pytest.mark.parametrize("setup", ["true  # load the venv", "true\n# trailing comment"])
def test_setup_ending_in_comment_still_runs_the_program(setup: str, tmp_path: Path) -> None:
    command = commands.shell_command(
        str(tmp_path), setup, {}, [sys.executable, "-c", "print('RAN')"]
    )
    assert _runs("/bin/sh", command, tmp_path)


def test_setup_with_or_does_not_bypass_failed_cd(tmp_path: Path) -> None:
    command = commands.shell_command(
        str(tmp_path / "missing"), "false || true", {}, [sys.executable, "-c", "print('RAN')"]
    )
    assert not _runs("/bin/sh", command, tmp_path)


def test_stdlib_programs_skip_site_packages() -> None:
    assert commands.bootstrap_argv("/py", "agent", 1, site=False)[:3] == ["/py", "-S", "-c"]
    assert commands.bootstrap_argv("/py", "doctor", 1)[:2] == ["/py", "-c"]  # finds torch
