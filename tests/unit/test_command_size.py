"""A command too long for a host's command line is refused before any host is contacted.

Every transport hands the command to a shell as one argument, which Linux
limits to 131,071 bytes (core/limits.py, MAX_COMMAND_BYTES); the real limit is
measured on simulated hosts in tests/cluster/test_launch.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.controller import launcher
from clusterlaunch.core.checkplan import check_command_sizes, checking_agent_command, command_size
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.limits import MAX_COMMAND_BYTES
from clusterlaunch.core.model import HostSpec, Inventory, JobPlan, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job

PIECE = "a" * 60_000
"""One argument: this process could not start with one of 128 KiB either."""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "far.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 1}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")

    def contact(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(launcher, "connect_all", contact)
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "far.yaml", "train.py", PIECE, PIECE, PIECE],
        ["run", "--env", f"BIG={PIECE}", "--env", f"HUGE={PIECE}{PIECE}", "far.yaml", "train.py"],
        ["run", "--dry-run", "far.yaml", "train.py", PIECE, PIECE, PIECE],
        ["check", "--env", f"BIG={PIECE}", "--env", f"HUGE={PIECE}{PIECE}", "far.yaml"],
        ["exec", "far.yaml", "--", "echo", PIECE, PIECE, PIECE],
    ],
    ids=["run-args", "run-env", "dry-run", "check-env", "exec-args"],
)
def test_refused_in_one_line_before_any_host_is_contacted(
    work: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("clusterlaunch: error: unreachable.invalid: its command line would be ")
    assert f"a host takes {MAX_COMMAND_BYTES:,} (Linux's limit on one argument)" in err
    assert "pass large data in a file" in err


def _plan(size: int, exec_argv: bool, count: int | None = None) -> JobPlan:
    """A two-host plan with a job argument of ``size`` bytes."""
    hosts = tuple(HostSpec(host=f"h{i}", gpus=1, workdir="/w") for i in range(2))
    targets = [SshTarget(alias=spec.host, hostname=spec.host) for spec in hosts]
    env = () if count is None else (("CLUSTERLAUNCH_RESTART_COUNT", str(count)),)
    options = LaunchOptions(script="train.py", script_args=("x" * size,), env=env)
    return plan_job(
        Inventory("h", hosts),
        targets,
        options,
        job_id="j",
        local_env={},
        local_cwd="/w",
        agent_size=70_000,
        exec_argv=("echo", "x" * size) if exec_argv else None,
    )


@pytest.mark.parametrize("exec_argv", [True, False], ids=["exec", "run"])
def test_the_limit_is_the_longest_command_sent(exec_argv: bool) -> None:
    """Counted: ``node.command`` for exec, the checking agent's command for run, the
    latter with its preflight words (nonce, port, timeout) at their longest."""
    plan = _plan(100, exec_argv)
    for node in plan.nodes:
        size = command_size(node, plan.master_addr, "train.py", "file", not exec_argv)
        if exec_argv:
            assert size == len(node.command)
        else:
            listen = 65535 if node.node_rank == 0 else None
            agent = checking_agent_command(
                node, plan.master_addr, listen, "f" * 16, "train.py", 1.23457e300, "file"
            )
            assert size == len(agent) > len(node.command)
    longest = max(
        command_size(n, plan.master_addr, "train.py", "file", not exec_argv) for n in plan.nodes
    )
    fits = _plan(100 + MAX_COMMAND_BYTES - longest, exec_argv)
    check_command_sizes(fits, "train.py", "file", not exec_argv)
    over = _plan(101 + MAX_COMMAND_BYTES - longest, exec_argv)
    with pytest.raises(UsageError, match=f"would be up to {MAX_COMMAND_BYTES + 1:,} bytes"):
        check_command_sizes(over, "train.py", "file", not exec_argv)


def test_room_is_kept_for_the_restart_counts_digits() -> None:
    """Restart 1,000 has 3 digits more than restart 0: that restart must fit as well."""
    plan = _plan(100, True, count=0)
    grown = MAX_COMMAND_BYTES - 3 - len(plan.nodes[0].command)
    check_command_sizes(_plan(100 + grown, True, count=0), None, "file", False, reserve=3)
    with pytest.raises(UsageError):
        check_command_sizes(_plan(101 + grown, True, count=0), None, "file", False, reserve=3)
    check_command_sizes(_plan(100 + grown, True, count=1000), None, "file", False)
