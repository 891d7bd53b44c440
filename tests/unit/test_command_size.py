"""Words too long for a host's ``exec`` are refused before any host is contacted.

The command travels on stdin (commands.for_login_shell); what a host's ``exec``
still limits is the job's words: one at most MAX_ARG_BYTES (Linux's
MAX_ARG_STRLEN), all together at most MAX_EXEC_BYTES (half of the usual
ARG_MAX). Measured on simulated hosts in tests/cluster/test_launch.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.checkplan import check_command_sizes, check_exec_words, exec_words
from clusterlaunch.core.envhandoff import renaming_script
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.limits import MAX_ARG_BYTES, MAX_EXEC_BYTES
from clusterlaunch.core.model import HostSpec, Inventory, JobPlan, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job

LONG = "a" * (MAX_ARG_BYTES + 1)
PIECE = "a" * 100_000
MANY = [PIECE] * 11  # 1.1 MB in all, each word fits


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "far.yaml", "train.py", LONG], "an argument ('aaaaaaaaaaaa'...) is 131,072 bytes"),
        (
            ["run", "--env", f"BIG={LONG}", "far.yaml", "train.py"],
            "BIG=... (name and value) is 131,076 bytes",
        ),
        (["run", "--dry-run", "far.yaml", "train.py", LONG], "is 131,072 bytes"),
        (
            ["check", "--env", f"BIG={LONG}", "far.yaml"],
            "BIG=... (name and value) is 131,076 bytes",
        ),
        (["exec", "far.yaml", "--", "echo", LONG], "an argument ('aaaaaaaaaaaa'...)"),
        (["run", "far.yaml", "train.py", *MANY], "and environment take 1,1"),
        (["exec", "far.yaml", "--", "echo", *MANY], "allows 1,048,576 (half of Linux's"),
        (
            ["run", *(f"--env=V{i}={PIECE}" for i in range(11)), "far.yaml", "train.py"],
            "(1,100,",  # the environment's share, named
        ),
    ],
    ids=[
        "run-arg",
        "run-env",
        "dry-run",
        "check-env",
        "exec-arg",
        "run-all",
        "exec-all",
        "env-all",
    ],
)
def test_refused_in_one_line_before_any_host_is_contacted(
    far_work: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("clusterlaunch: error: unreachable.invalid: "), err
    assert said in err and "pass large data in a file" in err, err


def _plan(words: list[str], exec_argv: bool, count: int | None = None) -> JobPlan:
    """A two-host plan whose job has the arguments ``words``."""
    hosts = tuple(HostSpec(host=f"h{i}", gpus=1, workdir="/w") for i in range(2))
    targets = [SshTarget(alias=spec.host, hostname=spec.host) for spec in hosts]
    env = () if count is None else (("CLUSTERLAUNCH_RESTART_COUNT", str(count)),)
    options = LaunchOptions(script="train.py", script_args=tuple(words), env=env)
    return plan_job(
        Inventory("h", hosts),
        targets,
        options,
        job_id="j",
        local_env={},
        local_cwd="/w",
        agent_size=70_000,
        exec_argv=("echo", *words) if exec_argv else None,
    )


@pytest.mark.parametrize("exec_argv", [True, False], ids=["exec", "run"])
def test_one_word_may_have_exactly_the_limit(exec_argv: bool) -> None:
    check_command_sizes(_plan(["a" * MAX_ARG_BYTES], exec_argv), "train.py", "file", not exec_argv)
    with pytest.raises(UsageError, match="is 131,072 bytes, and a host takes 131,071"):
        check_command_sizes(_plan([LONG], exec_argv), "train.py", "file", not exec_argv)


def _total(plan: JobPlan, exec_argv: bool) -> int:
    """The bytes of the host's largest exec: /bin/sh's, which sets the variables from
    ``__cl_NAME`` (core/envhandoff.py), its script holding the names."""
    node = plan.nodes[0]
    words = exec_words(node, plan.master_addr, "train.py", "file", not exec_argv)
    words = ["/bin/sh", "-c", renaming_script(node.env), "sh", *words]
    words += [f"__cl_{name}={value}" for name, value in node.env.items()]
    return sum(len(word.encode()) + 9 for word in words)


@pytest.mark.parametrize("exec_argv", [True, False], ids=["exec", "run"])
def test_all_words_may_take_exactly_the_limit(exec_argv: bool) -> None:
    """Counted as execve counts them: each word, its NUL, its pointer; for run, the
    checking agent's words (nonce, port, timeout) at their longest."""
    base = _total(_plan([PIECE] * 10, exec_argv), exec_argv)
    last = "a" * (MAX_EXEC_BYTES - base - 9)  # one word more: its bytes, NUL and pointer
    fits = _plan([PIECE] * 10 + [last], exec_argv)
    assert _total(fits, exec_argv) == MAX_EXEC_BYTES
    check_command_sizes(fits, "train.py", "file", not exec_argv)
    with pytest.raises(UsageError, match="take 1,048,577 bytes"):
        check_command_sizes(
            _plan([PIECE] * 10 + [last + "a"], exec_argv), "train.py", "file", not exec_argv
        )


def test_a_variable_may_have_the_limit_less_its_held_name() -> None:
    """/bin/sh gets each variable as __cl_NAME=VALUE, 5 bytes more than NAME=VALUE."""
    most = MAX_ARG_BYTES - len("__cl_")
    fits = {"BIG": "a" * (most - len("BIG="))}
    check_exec_words("h", fits, ["prog"])
    with pytest.raises(UsageError) as refused:
        check_exec_words("h", {"BIG": fits["BIG"] + "a"}, ["prog"])
    assert str(refused.value).startswith(
        f"h: BIG=... (name and value) is {most + 1:,} bytes, and a host takes {most:,} in one "
        "variable (Linux's MAX_ARG_STRLEN, less 5 bytes: each variable reaches the host as "
        "__cl_NAME=VALUE first): pass large data in a file"
    )
    assert "aaaa" not in str(refused.value)


def test_names_too_many_for_the_line_that_sets_them_are_refused_as_such() -> None:
    env = {f"V{i:05}_{'N' * 40}": "" for i in range(1_500)}
    with pytest.raises(
        UsageError, match=r"the names of the job.s 1,500 variables take 235,528 bytes in the line"
    ):
        check_exec_words("h", env, ["prog"])


def test_room_is_kept_for_the_restart_counts_digits() -> None:
    """Restart 1,000 has 3 digits more than restart 0: that restart must fit as well."""
    base = _total(_plan([PIECE] * 10, True, count=0), True)
    last = "a" * (MAX_EXEC_BYTES - base - 9 - 3)
    check_command_sizes(_plan([PIECE] * 10 + [last], True, count=0), None, "file", False, reserve=3)
    with pytest.raises(UsageError):
        check_command_sizes(
            _plan([PIECE] * 10 + [last + "a"], True, count=0), None, "file", False, reserve=3
        )
    check_command_sizes(_plan([PIECE] * 10 + [last], True, count=1000), None, "file", False)


@pytest.mark.parametrize(
    "argv", [["ps", "big.yaml"], ["kill", "big.yaml", "j1"], ["stacks", "big.yaml", "j1"]]
)
def test_ps_kill_and_stacks_check_each_hosts_env_before_contacting_it(
    far_work: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """jobctl carries the hosts file's env:; one too big failed on every host ("could not
    ask: jobctl failed with exit 126 (... Argument list too long)"). Found by a helper."""
    from clusterlaunch.cli import doctor
    from clusterlaunch.cli import main as cli_main

    def contact(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(cli_main, "connect_all", contact)
    monkeypatch.setattr(doctor, "connect_all", contact)
    (far_work / "big.yaml").write_text(
        f'hosts:\n  - {{host: h0, gpus: 1, env: {{BIG: "{PIECE}{PIECE}"}}}}\n'
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("clusterlaunch: error: h0: BIG=... (name and value) is 200,004 bytes")
    assert len(err.splitlines()) == 1


def test_a_host_whose_exec_refused_what_setup_exported_is_told_why() -> None:
    """setup: can export what no check sees beforehand (a helper's 200 kB variable)."""
    from clusterlaunch.core.reports import shell_failure

    said = shell_failure("python3", 126, "bash: line 2: /usr/bin/env: Argument list too long")
    assert said.startswith("the shell failed before Python started (exit 126): bash: line 2:")
    assert said.endswith(
        "with what setup: exports, are more than this host's exec takes: pass large data in a file"
    )
    assert shell_failure("/x", 127, "sh: 1: exec: /x: not found") == (
        "the shell failed before Python started (exit 127): sh: 1: exec: /x: not found"
    )


def test_a_step_srun_refused_is_srun_not_the_shell() -> None:
    from clusterlaunch.core.reports import shell_failure

    assert shell_failure("python3", 1, "srun: error: Slurm job 4 has expired") == (
        "srun failed before Python started (exit 1): srun: error: Slurm job 4 has expired"
    )
