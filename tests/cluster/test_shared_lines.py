"""A progress bar left on the console's line never has another rank's or host's line after it.

Real sshd hosts: node0 draws one redraw (``progress 50%\\r``) and goes quiet;
the other hosts print a line a second later. Every console line must start
with its own prefix (``grep '^\\[r2'`` finds rank 2), with no stray blank line
for the bar's ending newline, while ``--log-dir`` keeps the exact bytes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.support import PYTHON, run_cli_bytes, write_hosts

pytestmark = [pytest.mark.cluster]

BAR_THEN_QUIET = (
    "import os, sys, time\n"
    "rank = os.environ.get('RANK') or os.environ['ROLE']  # exec: no RANK\n"
    "if rank == '0':\n"
    "    sys.stdout.write('progress 50%\\r'); sys.stdout.flush(); time.sleep(2.5)\n"
    "else:\n"
    "    time.sleep(1); print(f'{rank} says hello', flush=True)\n"
)
PREFIX = re.compile(rb"^\[[^\]]+\] +")


def assert_lines_of_their_own(stdout: bytes, prefixes: list[bytes]) -> None:
    assert stdout.endswith(b"\n")
    lines = stdout[:-1].split(b"\n")
    for line in lines:
        assert PREFIX.match(line), stdout  # no line begins mid-way through another's
    for prefix in prefixes:
        assert any(line.startswith(prefix) for line in lines), stdout


@pytest.mark.torch
def test_run_a_ranks_bar_ends_before_other_ranks_lines(sim_cluster, tmp_path: Path) -> None:
    script = tmp_path / "bar.py"
    script.write_text(BAR_THEN_QUIET)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1), ("node2", 1)])
    logs = tmp_path / "logs"
    result = run_cli_bytes("run", sim_cluster, "--log-dir", str(logs), str(hosts), str(script))
    assert result.returncode == 0, result.stderr
    assert_lines_of_their_own(result.stdout, [b"[r0 node0:0] ", b"[r1 node1:0] ", b"[r2 node2:0] "])
    assert b"[r0 node0:0] progress 50%\r\n" in result.stdout
    assert (logs / "rank-0.log").read_bytes() == b"progress 50%\r"
    assert (logs / "rank-2.log").read_bytes() == b"2 says hello\n"


def test_exec_a_hosts_bar_ends_before_other_hosts_lines(sim_cluster, tmp_path: Path) -> None:
    script = tmp_path / "bar.py"
    script.write_text(BAR_THEN_QUIET)
    roles = [(f"node{index}", 1, {"env": {"ROLE": str(index)}}) for index in range(3)]
    hosts = write_hosts(tmp_path / "hosts.yaml", roles)
    logs = tmp_path / "logs"
    result = run_cli_bytes(
        "exec", sim_cluster, "--log-dir", str(logs), str(hosts), "--", PYTHON, str(script)
    )
    assert result.returncode == 0, result.stderr
    assert_lines_of_their_own(result.stdout, [b"[node0] ", b"[node1] ", b"[node2] "])
    assert b"[node0] progress 50%\r\n" in result.stdout
    log = (logs / "controller.log").read_bytes()
    assert b"[node0] progress 50%\r\n" in log and b"[node2] 2 says hello\n" in log
