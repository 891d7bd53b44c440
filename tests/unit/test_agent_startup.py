"""What an ``exec``'s agent loads as it starts: on every host of every job, each module costs.

The bundled agent is run as a host runs it (the bootstrap, ``python -S``,
payload on stdin) with ``-X importtime``, which names every module imported.
Measured here (``python -S``, 40-60 rounds): subprocess ~7 ms, json 4-6 ms,
ctypes 3.5 ms over ``_ctypes``, enum and signal ~3 ms, collections ~1.5 ms; the
whole agent running ``true`` now takes ~15 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from clusterlaunch.core.bootstrap import bootstrap_argv
from clusterlaunch.core.frames import EVENT, FrameDecoder
from clusterlaunch.remote import program_payload, records

ONLY_ELSEWHERE = {"subprocess", "json", "threading", "re", "socket", "typing", "shutil"}
"""Loaded only where they are needed: the preflight's checks (``run``), a root cause, records."""
NOWHERE = {"enum", "signal", "collections", "ctypes"}
"""Replaced by what they wrap: plain ints, ``_signal``, ``_collections.deque``, ``_ctypes``."""


def started_agent(command: list[str]) -> tuple[subprocess.Popen[bytes], set[str]]:
    """A bundled agent running ``command``, once it said "started"; and what it imported by then.

    ``-X importtime`` writes each line as the import happens, on unbuffered
    stderr, so every import of the start-up is in the pipe before the event is
    on stdout. (At its end an agent reads, with json, the job records of agents
    that died without removing them: a killed test's, say.)
    """
    payload = program_payload("agent")
    argv = bootstrap_argv(sys.executable, "agent", len(payload), site=False)
    argv[1:1] = ["-X", "importtime"]
    job_id = f"unit-start-{uuid.uuid4().hex[:8]}"  # every agent claims its id on this machine
    argv += ["--job-id", job_id, "--node-rank", "0", "--grace", "5", "--heartbeat-timeout", "15"]
    agent = subprocess.Popen(
        [*argv, "--", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert agent.stdin is not None and agent.stdout is not None and agent.stderr is not None
    agent.stdin.write(payload)
    agent.stdin.flush()  # and kept open: its end would tell the agent to stop
    decoder, events = FrameDecoder(), []
    while "started" not in events:
        data = os.read(agent.stdout.fileno(), 1 << 16)
        assert data, agent.stderr.read().decode()
        events += [f.event()["event"] for f in decoder.feed(data) if f.tag == EVENT]
    os.set_blocking(agent.stderr.fileno(), False)
    text = os.read(agent.stderr.fileno(), 1 << 20).decode()
    os.set_blocking(agent.stderr.fileno(), True)
    lines = [line.split("|")[-1] for line in text.splitlines() if line.startswith("import")]
    return agent, {line.strip() for line in lines[1:]}  # [0]: the header


def test_an_exec_agent_starts_loading_no_module_it_does_not_use() -> None:
    agent, modules = started_agent(["sleep", "30"])
    try:
        assert "zlib" in modules  # the list is real: the bootstrap's own import is there
        assert modules & (ONLY_ELSEWHERE | NOWHERE) == set()
    finally:
        agent.communicate(b"t", timeout=20)  # tear the job down
    assert agent.returncode == 128 + 15  # the job's SIGTERM, as a shell reports it


def test_an_agent_finishing_beside_live_agents_reads_none_of_their_records() -> None:
    """A machine that plays many hosts (or runs many jobs) has many live records."""
    me, start = os.getpid(), records.process_start_time(os.getpid())
    folder = next(path for path in records.state_dirs() if records.private_dir(path))
    live = os.path.join(folder, f"unit-live-{me}.n0.{me}.{start}.json")
    with open(live, "w") as handle:
        handle.write(json.dumps({"agent_pid": me, "agent_start": start}))
    try:
        agent, _ = started_agent(["true"])
        assert agent.stdout is not None
        while os.read(agent.stdout.fileno(), 1 << 16):
            pass  # to its end: the agent has finished, the records swept
        _, err = agent.communicate(timeout=20)
        assert os.path.exists(live)  # a live agent's record is left alone
    finally:
        os.unlink(live)
    assert agent.returncode == 0
    imported = {line.split("|")[-1].strip() for line in err.decode().splitlines()}
    assert "json" not in imported and "json.decoder" not in imported
