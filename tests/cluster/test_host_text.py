"""Text a host wrote, quoted in clusterlaunch's own messages, cannot drive the terminal.

A setup's output in the preflight table or in ``ps``'s error, a rank's last lines in
the failure summary: their control characters are written as escapes (``\\x1b``), so a
host cannot set the terminal's title, write its clipboard (OSC 52), clear the screen,
or erase the summary's own ``  | `` and pass its line off as clusterlaunch's. The
output of ranks and commands itself is passed on as it was written, as ssh does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

_SETUP = r"printf 'bad \033]52;c;cHduZWQ=\007 title \033]0;pwn\007 x\n' >&2; exit 1"
_SAID = r"bad \x1b]52;c;cHduZWQ=\x07 title \x1b]0;pwn\x07 x"
_CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # all but the newline


def test_a_setups_output_in_the_preflight_table_is_escaped(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": _SETUP})])
    result = run_cli("check", sim_cluster, str(hosts))
    assert result.returncode == 2, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("0 ")]
    assert row.endswith(f"FAIL      setup failed (exit 1): {_SAID}"), result.stdout
    assert not _CONTROLS.search(result.stdout + result.stderr), (result.stdout, result.stderr)


def test_a_setups_output_in_an_error_of_ps_is_escaped(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"setup": _SETUP})])
    result = run_cli("ps", sim_cluster, str(hosts))
    assert result.returncode == 2, result.stderr
    said = f"clusterlaunch: error: node0: could not ask: setup failed with exit 1 ({_SAID})\n"
    assert result.stderr == said


@pytest.mark.torch
def test_a_ranks_last_lines_in_the_summary_are_escaped_its_output_is_not(
    sim_cluster, tmp_path: Path
) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = run_cli("run", sim_cluster, str(hosts), "escapes.py")
    assert result.returncode == 3, result.stderr[-3000:]
    summary = result.stderr[result.stderr.index("clusterlaunch: job failed: rank 0") :]
    assert summary.endswith(
        "last 4 line(s) of rank 0:\n"
        "  | step 2/2\n"
        "  | title \\x1b]0;pwned\\x07 clipboard \\x1b]52;c;cHduZWQ=\\x07 clear \\x1b[2J\n"
        "  | clusterlaunch: job finished OK\n"  # the line's last redraw, after its "  | "
        "  | fake\\x1b[2K\\x1b[1Gclusterlaunch: job finished OK\n"
    ), summary
    assert not _CONTROLS.search(summary), summary
    # The rank's own lines go as written: its bar's redraws each labelled, its escapes raw.
    prefix = "[r0 node0:0] "
    assert f"{prefix}step 1/2\r{prefix}step 2/2\n" in result.stdout
    assert f"{prefix}title \x1b]0;pwned\x07 clipboard \x1b]52;" in result.stdout


def test_a_commands_last_lines_in_execs_summary_are_escaped(sim_cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    command = r"printf 'x \033]0;pwn\007 y\n'; exit 4"
    result = run_cli("exec", sim_cluster, str(hosts), "--", "sh", "-c", command)
    assert result.returncode == 4, result.stderr
    assert result.stdout == "[node0] x \x1b]0;pwn\x07 y\n"  # the command's output: as written
    assert result.stderr.endswith("last 1 line(s) of node0:\n  | x \\x1b]0;pwn\\x07 y\n")
    assert not _CONTROLS.search(result.stderr), result.stderr
