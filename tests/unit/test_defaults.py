"""Defaults: each number written once (core/defaults.py) and shown in docs/cli.md and --help."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterlaunch.cli.parser import build_parser
from clusterlaunch.core import defaults
from clusterlaunch.core.defaults import SHARED_ATTRIBUTES as SHARED_DEFAULTS
from clusterlaunch.core.model import LaunchOptions

CLI_DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
MINIMAL = {
    "run": ["run", "h.yaml", "t.py"],
    "exec": ["exec", "h.yaml"],
    "check": ["check", "h.yaml"],
    "ps": ["ps", "h.yaml"],
    "kill": ["kill", "h.yaml", "job"],
    "stacks": ["stacks", "h.yaml", "job"],
    "doctor": ["doctor", "h.yaml"],
}


def documented_default(option: str) -> str:
    """The default column of ``option``'s row in docs/cli.md's option tables."""
    row = re.search(rf"^\| `{re.escape(option)}[ `][^|]*\| ([^|]+) \|", CLI_DOC, re.MULTILINE)
    assert row, f"no row for {option} in docs/cli.md"
    return row.group(1).strip()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--fanout", defaults.FANOUT),
        ("--connect-timeout", defaults.CONNECT_TIMEOUT_S),
        ("--setup-timeout", defaults.SETUP_TIMEOUT_S),
        ("--grace", defaults.GRACE_S),
        ("--heartbeat-timeout", defaults.HEARTBEAT_TIMEOUT_S),
    ],
)
def test_docs_and_help_show_the_defaults(
    option: str, value: float, capsys: pytest.CaptureFixture[str]
) -> None:
    assert documented_default(option) == f"{value:g}"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    entry = help_text.split(f" {option} ", 1)[1].split(" --", 1)[0]
    assert f"default {value:g})" in entry


@pytest.mark.parametrize("command", sorted(MINIMAL))
def test_every_command_carries_every_shared_attribute(command: str) -> None:
    """What cli/args.py reads is there for every command, as the command's own flag sets it."""
    args = build_parser().parse_args(MINIMAL[command])
    assert set(SHARED_DEFAULTS) <= set(vars(args))
    assert args.command == command
    assert (args.grace, args.heartbeat_timeout) == (defaults.GRACE_S, defaults.HEARTBEAT_TIMEOUT_S)
    assert args.setup_timeout == defaults.SETUP_TIMEOUT_S
    assert (args.fanout, args.connect_timeout) == (defaults.FANOUT, defaults.CONNECT_TIMEOUT_S)
    if command in ("run", "exec", "check"):
        assert args.env == [] and args.forward_env == []  # the flags' own (appendable) lists


def test_launch_options_default_to_the_same_numbers() -> None:
    options = LaunchOptions(script="t.py")
    assert (options.grace, options.heartbeat_timeout, options.setup_timeout) == (
        defaults.GRACE_S,
        defaults.HEARTBEAT_TIMEOUT_S,
        defaults.SETUP_TIMEOUT_S,
    )


def test_connection_settings_come_from_defaults() -> None:
    """SshSettings takes its numbers from core/defaults.py (the probe's: test_planner.py)."""
    from clusterlaunch.transport import SshSettings

    settings = SshSettings()
    assert settings.keepalive_interval == defaults.KEEPALIVE_INTERVAL_S
    assert settings.dead_after == defaults.DEAD_AFTER_S
    assert settings.client == defaults.SSH_CLIENT
    assert settings.connect_timeout == defaults.CONNECT_TIMEOUT_S
