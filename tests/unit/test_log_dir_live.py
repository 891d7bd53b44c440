"""``--log-dir`` writes each chunk through at once: what the console showed is in the files.

The files were buffered and written out when the job ended: ``tail -f rank-0.log`` showed
nothing for kilobytes (hours for a quiet job), and a controller killed outright (SIGKILL,
Ctrl-\\, the OOM killer) left every file empty though the console had shown the lines.
The real job is ``tests/cluster/test_log_dir_live.py``.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from clusterlaunch.controller.console import Console
from clusterlaunch.controller.logdir import LogDir
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.core.lines import Prefixes


def test_what_the_console_shows_is_in_the_files_at_once(tmp_path: Path) -> None:
    log_dir = LogDir(str(tmp_path))
    log_dir.open(["rank-0.log", "controller.log"])
    out = io.BytesIO()
    prefixes = Prefixes([(0, "node0", 0)], ["node0"], color=False)
    router = OutputRouter(prefixes, Console(out, io.BytesIO()), log_dir=log_dir)
    router.message("job j1: 1 host(s), world size 1")
    assert (tmp_path / "controller.log").read_bytes().endswith(b"job j1: 1 host(s), world size 1\n")
    router.rank_output(0, False, b"tick 1\n")
    assert out.getvalue() == b"[r0 node0:0] tick 1\n"
    assert (tmp_path / "rank-0.log").read_bytes() == b"tick 1\n"  # not closed, not flushed
    router.host_output("node0", True, b"torchrun says\n")
    assert (tmp_path / "controller.log").read_bytes().endswith(b"[node0]      torchrun says\n")
    log_dir.close()


KILLED = textwrap.dedent(
    """
    import os, signal, sys
    from clusterlaunch.controller.logdir import LogDir
    log_dir = LogDir(sys.argv[1])
    log_dir.open(["rank-0.log", "controller.log"])
    log_dir.write("controller.log", b"the header\\n")
    log_dir.write("rank-0.log", b"tick 1\\n")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_controller_killed_outright_leaves_what_it_wrote(tmp_path: Path) -> None:
    process = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert (tmp_path / "controller.log").read_bytes() == b"the header\n"
    assert (tmp_path / "rank-0.log").read_bytes() == b"tick 1\n"
