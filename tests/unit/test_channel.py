"""What code that is not ours prints inside the agent or the probe never reaches their channel.

A ``sitecustomize.py`` that prints (run by the preflight's ``site.main()``) or a
``-m`` package whose ``__init__`` prints (imported by the module check) wrote
between the frames: ``run`` reported a job that succeeded as a lost host (255),
``check -m`` said ``garbled probe output``. Each program is run here as a host
runs it: the bootstrap under ``python -S``, the payload on stdin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from clusterlaunch.core.bootstrap import bootstrap_argv
from clusterlaunch.core.frames import EVENT, FrameDecoder
from clusterlaunch.remote import program_payload

NOISE = "x" * 20000  # more than a pipe's stdout buffer: print writes it through at once


def chatty_host(tmp_path: Path) -> dict[str, str]:
    """A workdir with a package that prints as it is imported, and the environment of a
    host whose setup puts a printing sitecustomize.py on PYTHONPATH."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(f"print({NOISE!r})\n")
    (tmp_path / "chatty").mkdir()
    (tmp_path / "chatty" / "__init__.py").write_text(f"print('chatty: ' + {NOISE!r})\n")
    (tmp_path / "chatty" / "train.py").write_text("")
    return {**os.environ, "PYTHONPATH": str(tmp_path / "site")}


def run_bundled(name: str, args: list[str], stdin: bytes, cwd: Path, env: dict[str, str]):
    payload = program_payload(name)
    argv = [*bootstrap_argv(sys.executable, name, len(payload), site=False), *args]
    return subprocess.run(
        argv, input=payload + stdin, capture_output=True, cwd=cwd, env=env, timeout=60
    )


def events(stdout: bytes) -> list[dict[str, object]]:
    frames = FrameDecoder().feed(stdout)  # raises on a garbled frame
    return [json.loads(frame.data) for frame in frames if frame.tag == EVENT]


def test_the_probe_keeps_what_site_and_the_module_print_off_its_channel(tmp_path: Path) -> None:
    env = chatty_host(tmp_path)
    done = run_bundled("probe", ["--module", "chatty.train", "--timeout", "5"], b"", tmp_path, env)
    assert done.returncode == 0, done.stderr[-2000:].decode()
    stages = events(done.stdout)
    assert [stage["stage"] for stage in stages] == ["static", "end"]
    assert stages[0]["script_problem"] is None
    assert NOISE.encode() not in done.stdout
    assert NOISE.encode() in done.stderr  # site ran: the job's sys.path was seen


def test_the_agent_keeps_what_site_prints_off_its_channel(tmp_path: Path) -> None:
    env = chatty_host(tmp_path)
    go = {"argv": ["sh", "-c", "echo ran"], "first_rank": 0, "env": {}, "unset": []}
    options = ["--job-id", "t", "--node-rank", "0", "--grace", "5", "--heartbeat-timeout", "15"]
    options += ["--nonce", "n", "--preflight-timeout", "30", "--master-addr", "127.0.0.1"]
    options += ["--timeout", "5", "--module", "chatty.train", "--rank-files"]
    options += ["--", "sh"]
    lines = b"\n" + f"go {json.dumps(go)}\n".encode()  # no master port; the go
    done = run_bundled("agent", options, lines, tmp_path, env)
    said = [event.get("stage") or event.get("event") for event in events(done.stdout)]
    # Its stdin ends after the go: a "stopping" may come before the exit.
    assert said[:3] == ["static", "end", "started"], done.stderr[-2000:].decode()
    assert said[-1] == "exit"
    assert NOISE.encode() not in done.stdout
    assert NOISE.encode() in done.stderr
