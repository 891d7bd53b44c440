"""An option a command does not take is the word the error names, however it is written.

argparse (3.11) takes ``--bogus='x y'`` (a space after the ``=``) for a positional,
and in ``ps --env A=1 HOSTS`` takes ``A=1`` for HOSTS: both made it name the real
positionals instead (``unrecognized arguments: hosts.yaml``).
"""

from __future__ import annotations

import pytest

from clusterlaunch.cli.main import main

POSITIONALS = {
    "run": ["hosts.yaml", "train.py"],
    "exec": ["hosts.yaml", "--", "true"],
    "check": ["hosts.yaml"],
    "ps": ["hosts.yaml"],
    "kill": ["hosts.yaml", "job-1"],
    "stacks": ["hosts.yaml", "job-1"],
    "doctor": ["hosts.yaml"],
}


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize("command", sorted(POSITIONALS))
def test_an_unknown_option_whose_value_has_a_space_is_named(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    positionals = POSITIONALS[command]
    hosts, rest = positionals[:1], positionals[1:]
    err = _error([command, "--bogus=x y", *hosts, *rest], capsys)
    expected = f"unrecognized arguments: --bogus=x y (see clusterlaunch {command} --help)"
    assert err == f"clusterlaunch: error: {expected}\n"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["check", "--torchrun-args=--mon 1", "hosts.yaml"], "--torchrun-args=--mon 1"),
        (["exec", "--torchrun-args=--a b", "hosts.yaml", "--", "true"], "--torchrun-args=--a b"),
        (["ps", "--env", "A=1", "hosts.yaml"], "--env"),
        (["kill", "--grace", "5", "hosts.yaml", "job-1"], "--grace"),
        (["stacks", "--workdir", "/w", "hosts.yaml", "job-1"], "--workdir"),
        (["exec", "hosts.yaml", "--ranks", "0", "--", "true"], "--ranks"),
    ],
)
def test_an_option_of_another_command_is_named_not_its_value(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = f"unrecognized arguments: {named} (see clusterlaunch {argv[0]} --help)"
    assert _error(argv, capsys) == f"clusterlaunch: error: {expected}\n"


def test_a_value_with_spaces_of_a_known_option_is_still_a_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--torchrun-args "--monitor-interval=1 --tee 3"``: the whole string is the value
    (here refused by torchrun-args' own check, which names the owned --tee)."""
    argv = ["run", "--dry-run", "--torchrun-args", "--monitor-interval=1 --tee 3", "h", "t.py"]
    assert "--torchrun-args: --tee is set by clusterlaunch" in _error(argv, capsys)
