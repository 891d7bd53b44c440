"""What an ``exec``'s agent loads as it starts: on every host of every job, each module costs.

The bundled agent is run as a host runs it (the bootstrap, ``python -S``,
payload on stdin) with ``-X importtime``, which names every module imported.
Measured here (``python -S``, 40-60 rounds): subprocess ~7 ms, json 4-6 ms,
enum and signal ~3 ms, collections ~1.5 ms; the whole agent now takes ~18 ms.
"""

from __future__ import annotations

import subprocess
import sys

from clusterlaunch.core.bootstrap import bootstrap_argv
from clusterlaunch.core.frames import EVENT, FrameDecoder
from clusterlaunch.remote import program_payload

ONLY_ELSEWHERE = {"subprocess", "json", "threading", "re", "socket", "typing", "shutil"}
"""Loaded only where they are needed: the preflight's checks (``run``), a root cause, records."""
NOWHERE = {"enum", "signal", "collections"}
"""Replaced by what they wrap: plain ints, ``_signal``, ``_collections.deque``."""


def run_agent(command: list[str]) -> tuple[list[dict[str, object]], set[str]]:
    """The events of a bundled agent that runs ``command``, and the modules it imported."""
    payload = program_payload("agent")
    argv = bootstrap_argv(sys.executable, "agent", len(payload), site=False)
    argv[1:1] = ["-X", "importtime"]
    argv += ["--job-id", "t", "--node-rank", "0", "--grace", "5", "--heartbeat-timeout", "15"]
    agent = subprocess.Popen(
        [*argv, "--", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert agent.stdin is not None and agent.stdout is not None and agent.stderr is not None
    agent.stdin.write(payload)
    agent.stdin.flush()  # and kept open: its end would tell the agent to stop
    out, err = agent.stdout.read(), agent.stderr.read()
    agent.stdin.close()
    assert agent.wait(timeout=20) == 0, err.decode()
    events = [frame.event() for frame in FrameDecoder().feed(out) if frame.tag == EVENT]
    lines = [line.split("|")[-1] for line in err.decode().splitlines() if line.startswith("import")]
    return events, {line.strip() for line in lines[1:]}  # [0]: the header


def test_an_exec_agent_loads_no_module_it_does_not_use() -> None:
    events, modules = run_agent(["true"])
    assert [event["event"] for event in events] == ["started", "exit"]
    assert events[-1]["code"] == 0
    assert "zlib" in modules  # the list is real: the bootstrap's own import is there
    assert modules & (ONLY_ELSEWHERE | NOWHERE) == set()
