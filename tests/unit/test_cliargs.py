"""Command-line parsing details fixed after review: exec options, option groups, checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.args import check_local_script
from clusterlaunch.cli.main import main
from clusterlaunch.cli.parser import build_parser
from clusterlaunch.cli.passthrough import check_script_argument, split_passthrough
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job


@pytest.mark.parametrize(
    ("argv", "head", "passthrough"),
    [
        (["run", "h", "t.py", "--", "x"], ["run", "h", "t.py"], ["--", "x"]),
        (["run", "h", "--ranks", "0", "t.py", "--ranks"], ["run", "h", "--ranks", "0", "t.py"],
         ["--ranks"]),
        (["exec", "h", "--", "echo", "--", "a"], ["exec", "h"], ["echo", "--", "a"]),
        (["exec", "h", "echo", "-n", "hi"], ["exec", "h"], ["echo", "-n", "hi"]),
        (["exec", "h", "--env", "X=1", "--", "cmd"], ["exec", "h", "--env", "X=1"], ["cmd"]),
        (["exec", "h", "--fail-fast", "--env=X=1", "cmd"], ["exec", "h", "--fail-fast",
         "--env=X=1"], ["cmd"]),
        (["check", "h", "s.py"], ["check", "h", "s.py"], []),
        (["check", "h", "--env", "X=1", "s.py"], ["check", "--env", "X=1", "h", "s.py"], []),
    ],
)  # fmt: skip
def test_split_passthrough(argv: list[str], head: list[str], passthrough: list[str]) -> None:
    assert split_passthrough(build_parser(), argv) == (head, passthrough)


@pytest.mark.parametrize(
    ("between", "script", "kind"),
    [
        (["--env", "X=1"], "s.py", (False, False)),
        (["--include", "node0"], "s.py", (False, False)),
        (["-m"], "json.tool", (True, False)),
        (["--no-python"], "/bin/true", (False, True)),
        (["--env=X=1", "--forward-env", "NCCL_*"], "s.py", (False, False)),
    ],
)
def test_check_takes_options_between_hosts_and_script(
    between: list[str], script: str, kind: tuple[bool, bool]
) -> None:
    """docs/cli.md: options go before or between the positional arguments, as for run."""
    parser = build_parser()
    head, rest = split_passthrough(parser, ["check", "h.yaml", *between, script])
    args = parser.parse_args(head)
    assert (args.hosts, args.script, (args.module, args.no_python), rest) == (
        "h.yaml",
        script,
        kind,
        [],
    )


@pytest.mark.parametrize("flag", ["-m", "--no-python"])
def test_check_kind_flag_without_script_is_refused(
    flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-m and --no-python say what SCRIPT is: without one, both are a mistake."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    assert main(["check", flag, str(hosts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"clusterlaunch: error: {flag}: give the ") and err.count("\n") == 1


def test_exec_options_after_hosts_are_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    code = main(["exec", "--dry-run", str(hosts), "--env", "X=1", "--", "echo", "hi"])
    out = capsys.readouterr().out
    assert code == 0
    assert "X=1" in out and out.rstrip().endswith("-- echo hi")


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--json", "H", "t.py"],  # --json without --dry-run
        ["check", "--grace", "3", "H"],  # job options do not apply to check
        ["check", "--timeout", "3", "H"],
    ],
)
def test_options_that_do_not_apply_are_refused(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    code = main([str(hosts) if word == "H" else word for word in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("clusterlaunch: error:") and err.count("\n") == 1


def _plan(workdir: str | None) -> tuple[object, LaunchOptions]:
    options = LaunchOptions(script="train.py")
    inventory = Inventory(path="h", hosts=(HostSpec(host="a", gpus=1, workdir=workdir),))
    plan = plan_job(
        inventory,
        [SshTarget(alias="a", hostname="10.0.0.1")],
        options,
        job_id="j",
        local_env={},
        local_cwd="/here",
        agent_size=1,
    )
    return plan, options


def test_local_script_check_only_when_the_hosts_run_this_directory(tmp_path: Path) -> None:
    plan, options = _plan(workdir=None)  # workdir = /here, the controller's directory
    with pytest.raises(UsageError, match="no such script here"):
        check_local_script(plan, options, cwd="/here")  # type: ignore[arg-type]
    elsewhere, _ = _plan(workdir="/shared/project")  # the hosts file's workdir
    check_local_script(elsewhere, options, cwd="/here")  # type: ignore[arg-type]
    (tmp_path / "train.py").write_text("")
    with pytest.raises(UsageError):  # --sync copies this directory: it must have the script
        check_local_script(elsewhere, options, synced=True, cwd="/here")  # type: ignore[arg-type]
    check_local_script(elsewhere, options, synced=True, cwd=str(tmp_path))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("override", "configured", "policy"),
    [
        (None, None, "accept-new"),
        (None, "yes", "strict"),
        (None, "ask", "strict"),
        (None, "accept-new", "accept-new"),
        (None, "no", "accept-new"),  # never weaker than accept-new
        (None, "off", "accept-new"),
        ("accept-new", "yes", "accept-new"),  # the flag wins
        ("strict", "no", "strict"),
    ],
)
def test_host_key_policy_resolution(
    override: str | None, configured: str | None, policy: str
) -> None:
    target = SshTarget(alias="a", hostname="10.0.0.1", host_key_checking=configured)
    chosen, origin = target.key_policy(override)
    assert chosen == policy
    assert origin  # said in the refusal message


def test_sandbox_help_names_the_real_first_port() -> None:
    from clusterlaunch.cli.sandbox import FIRST_PORT
    from clusterlaunch.testing import DEFAULT_PORT

    assert FIRST_PORT == DEFAULT_PORT


def test_starting_the_cli_does_not_load_optional_parts() -> None:
    import subprocess
    import sys

    code = (
        "import sys, clusterlaunch.cli.main; "
        "print(sorted(m for m in ('clusterlaunch.testing.sandbox', 'clusterlaunch.testing', "
        "'clusterlaunch.controller.sync', 'pathspec') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("flag", "in_file", "chosen"),
    [
        ([], None, "paramiko"),  # core/defaults.py's SSH_CLIENT
        ([], "openssh", "openssh"),
        (["--ssh-client", "paramiko"], "openssh", "paramiko"),  # the flag wins
        (["--ssh-client", "openssh"], "paramiko", "openssh"),
    ],
)
def test_ssh_client_flag_wins_over_the_hosts_file(
    flag: list[str], in_file: str | None, chosen: str
) -> None:
    from clusterlaunch.cli.args import ssh_settings

    args = build_parser().parse_args(["exec", *flag, "h.yaml"])
    inventory = Inventory(path="h.yaml", hosts=(HostSpec(host="a", gpus=1),), ssh_client=in_file)
    assert ssh_settings(args, inventory).client == chosen


def test_a_bad_ssh_client_in_the_hosts_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("ssh_client: ssh\nhosts:\n  - {host: 192.0.2.1, gpus: 1}\n")
    marker = tmp_path / "ran"
    assert main(["exec", str(hosts), "--", "touch", str(marker)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"clusterlaunch: error: {hosts}:1: ssh_client: must be paramiko or openssh, "
        "got 'ssh'; write ssh_client: paramiko or ssh_client: openssh\n"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("after", "named"),
    [(["-x"], "-x"), (["--lr", "3"], "--lr"), (["data.txt"], "data.txt"), (["--x=1"], "--x=1")],
)
def test_a_word_after_checks_script_is_named_as_the_scripts(
    after: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run command line copied into check: -x pointed to --env, --lr and data.txt were
    "unrecognized arguments" of check's own."""
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    assert main(["check", str(hosts), "--no-python", "prog", *after]) == 2
    assert capsys.readouterr().err == (
        f"clusterlaunch: error: {named}: check takes no arguments for SCRIPT (it starts "
        "nothing); leave out what follows SCRIPT, or use run\n"
    )


def test_options_of_checks_own_may_follow_its_script() -> None:
    parser = build_parser()
    words = ["check", "h.yaml", "s.py", "--env", "A=1", "--master-port", "0"]
    assert check_script_argument(parser, words) is None
    assert check_script_argument(parser, ["run", "h.yaml", "check", "--lr", "3"]) is None
