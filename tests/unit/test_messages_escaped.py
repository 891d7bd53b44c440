"""clusterlaunch's own messages write a host's control characters as escapes; the output
of ranks and commands passes as it was written (tests/cluster/test_host_text.py: real hosts)."""

from __future__ import annotations

import io
from pathlib import Path

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core import render
from clusterlaunch.core.errors import JobOutcome
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.stacks import StackDump, stacks_text

HOSTILE = "osc52 \x1b]52;c;cHduZWQ=\x07 title \x1b]0;pwn\x07 csi \x9b2J del \x7f tab\t"
ESCAPED = "osc52 \\x1b]52;c;cHduZWQ=\\x07 title \\x1b]0;pwn\\x07 csi \\x9b2J del \\x7f tab\\t"


def _streams() -> tuple[Console, io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    return Console(out, err), out, err


def test_printable_keeps_a_messages_lines_only_when_asked() -> None:
    assert render.printable(f"{HOSTILE}\nnext") == f"{ESCAPED}\\nnext"
    assert render.printable(f"{HOSTILE}\r\nnext", lines=True) == f"{ESCAPED}\\r\nnext"


def test_the_consoles_messages_and_reports_escape_what_a_host_wrote() -> None:
    console, out, err = _streams()
    console.say(f"clusterlaunch: error: node0: could not ask: {HOSTILE}\nsecond line")
    console.show(f"node  status\n0     {HOSTILE}")
    said = f"clusterlaunch: error: node0: could not ask: {ESCAPED}\nsecond line\n"
    assert err.getvalue() == said.encode()
    assert out.getvalue() == f"node  status\n0     {ESCAPED}\n".encode()


def test_a_summary_quotes_a_ranks_lines_escaped_and_its_output_goes_as_written(
    tmp_path: Path,
) -> None:
    console, out, _ = _streams()
    log_dir = LogDir(str(tmp_path / "logs"))
    log_dir.open(["rank-0.log", "controller.log"])
    router = OutputRouter(Prefixes([(0, "h", 0)], ["h"], color=False), console, log_dir=log_dir)
    written = f"{HOSTILE}\nbar 1\rbar 2\nfake\x1b[2K\x1b[1Gclusterlaunch: job finished OK\n"
    router.rank_output(0, False, written.encode())
    tail = router.tails.lines(0)
    router.message(
        render.outcome_text(JobOutcome(3, "rank 0 on h exited with code 3", "h", 0, tail))
    )
    router.close()
    log_dir.close()
    assert (tmp_path / "logs" / "rank-0.log").read_bytes() == written.encode()
    shown = "[r0 h:0] " + written.replace("\n", "\n[r0 h:0] ").replace("\r", "\r[r0 h:0] ")
    assert out.getvalue() == shown.removesuffix("[r0 h:0] ").encode()
    summary = (
        "clusterlaunch: job failed: rank 0 on h exited with code 3\n"
        "last 3 line(s) of rank 0:\n"
        f"  | {ESCAPED}\n"
        "  | bar 2\n"
        "  | fake\\x1b[2K\\x1b[1Gclusterlaunch: job finished OK\n"
    )
    assert console.err.stream.getvalue() == summary.encode()
    assert (tmp_path / "logs" / "controller.log").read_text().endswith(summary[14:])


def test_a_stack_dump_escapes_what_the_host_said() -> None:
    dumps = [
        StackDump("node0", 0, 0, 10, f'Thread 10 (idle): "{HOSTILE}"\n'),
        StackDump("node0", 1, 1, 11, None, f"py-spy failed: {HOSTILE}"),
    ]
    prefixes = Prefixes([(0, "node0", 0), (1, "node0", 1)], ["node0"], color=False)
    text = stacks_text(dumps, [("node0", f"note {HOSTILE}")], prefixes).decode()
    assert text == (
        f'[r0 node0:0] Thread 10 (idle): "{ESCAPED}"\n'
        f"[r1 node0:1] (pid 11) no stack: py-spy failed: {ESCAPED}\n"
        f"[node0]      note {ESCAPED}\n"
    )
