"""Every table's columns line up on a terminal, whatever a host put in a cell.

A cell was padded by its code points before the console escaped it: a host's
``\\x1b`` (one code point, four cells once escaped) pushed the rest of its row
four cells right; a CJK character (two cells), a combining mark or a zero-width
joiner (none) did the same. The tables are checked as the console writes them
(``message_bytes``), measured in cells.
"""

from __future__ import annotations

import time

from clusterlaunch.controller.console import message_bytes
from clusterlaunch.core import doctorview, render
from clusterlaunch.core.cells import columns, cut, pad
from clusterlaunch.core.doctor import HostCheck
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.reports import HostReport, KillReport, PreflightResult, RemoteJob
from tests.unit.plans import two_ranks_per_host

# Escaped bytes, wide CJK, a combining mark, an emoji, a zero-width joiner, a soft hyphen.
ODD = ["3.11\x1b[31m", "节点一", "e\u0301te\u0301", "🚀go", "a\u200db", "co\u00adop", "\t"]


def shown(text: str) -> list[str]:
    """The lines the console writes for ``text``."""
    return message_bytes(text).decode().splitlines()


def column_starts(line: str, cells: list[str]) -> list[int]:
    """Where (in terminal cells) each of ``cells``, as escaped, starts in ``line``."""
    starts, at = [], 0
    for cell in cells:
        at = line.index(render.printable(cell), at)
        starts.append(columns(line[:at]))
        at += len(render.printable(cell))
    return starts


def test_cells_are_counted_as_a_terminal_shows_them() -> None:
    assert [columns(render.printable(text)) for text in ODD] == [12, 6, 3, 4, 2, 5, 2]
    assert columns("\u1100\u1161") == 2  # a Hangul syllable written as its two jamo
    assert columns("❤\ufe0f") == 1  # a variation selector takes no cell of its own
    assert pad("节点", 6) == "节点  " and cut("节点一号", 5, "...") == "节..."


def test_the_generic_table_lines_up_every_column() -> None:
    rows = [[odd, "x", odd] for odd in ODD]
    lines = shown(render.table(("first", "second", "third"), rows))
    header = column_starts(lines[0], ["first", "second", "third"])
    for line, row in zip(lines[1:], rows, strict=True):
        assert column_starts(line, row) == header, line


def test_the_preflight_table_lines_up_what_each_host_said() -> None:
    said = [("3.11.7", "2.3"), ("3.11\x1b[2J", "2.3+🚀"), ("3.1\u0301", "x")]
    plan = two_ranks_per_host(("node0", "节点一", "n2"))
    reports = [
        HostReport(node, {"python": python, "torch": torch, "gpus": []}, connected=True)
        for node, (python, torch) in zip(plan.nodes, said, strict=True)
    ]
    lines = shown(render.preflight_text(PreflightResult(reports, 29500)))
    header = column_starts(lines[0], ["host", "python", "torch", "gpus", "master:29500", "status"])
    for line, report in zip(lines[1:], reports, strict=True):
        cells = [report.node.host, report.static["python"], report.static["torch"], "0", "ok", "ok"]
        assert column_starts(line, cells) == header, line


def test_the_ps_table_lines_up_and_cuts_a_long_command_in_cells() -> None:
    commands = [("sh", "-c", "echo \x1b]52;c;x\x07"), ("python", "--name", "节点" * 60)]
    jobs = [RemoteJob(f"job{i}", f"节点{i}", 0, 1000.0, c, 10 + i) for i, c in enumerate(commands)]
    lines = shown(render.jobs_text(jobs))
    header = column_starts(lines[0], ["job", "host", "node", "attempt", "started", "command"])
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1000.0))
    for line, job in zip(lines[1:], jobs, strict=True):
        cells = [job.job_id, job.host, "0", "1", started, job.command[0]]
        assert column_starts(line, cells) == header, line
    long_command = lines[2][lines[2].index("python") :]
    assert columns(long_command) == 80 and long_command.endswith("...")


def test_the_kill_table_lines_up_hosts_named_in_any_script() -> None:
    reports = [KillReport("节点一", 0, True, 0.5, nodes=3), KillReport("e\u0301", 2, False, 60.0)]
    lines = shown(render.kill_text("j", reports))[1:]
    header = column_starts(lines[0], ["host", "node", "state", "after"])
    assert column_starts(lines[1], ["节点一", "0", "stopped", "0.50 s"]) == header
    assert column_starts(lines[2], ["-", "1", "not found", "-"]) == header
    assert column_starts(lines[3], ["e\u0301", "2", "STILL RUNNING", "60.00 s"]) == header


def test_doctors_matrix_lines_up_hosts_named_in_any_script() -> None:
    hosts = ["节点一", "node1", "e\u0301"]
    checks = [HostCheck(host, ("127.0.0.1",), pairs={h: {} for h in hosts}) for host in hosts]
    lines = doctorview.matrix_text(checks).splitlines()[1:]
    header = column_starts(lines[0], ["from \\ to", *hosts])
    for line, host in zip(lines[1:], hosts, strict=True):
        cells = [host] + ["-" if peer == host else "ok" for peer in hosts]
        assert column_starts(line, cells) == header, line


def test_output_prefixes_line_up_hosts_named_in_any_script() -> None:
    prefixes = Prefixes([(0, "节点一", 0), (1, "node1", 0)], ["节点一", "node1"], color=False)
    shown_prefixes = [prefixes.rank(0), prefixes.rank(1), prefixes.host("节点一")]
    assert {columns(prefix.decode()) for prefix in shown_prefixes} == {columns("[r0 节点一:0] ")}
