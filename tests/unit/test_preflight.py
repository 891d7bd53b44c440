"""``run_preflight`` through the local transport (real probes, no sshd) and a failing one.

It promises never to raise for a host problem: a host whose probe cannot even
be started is a row of the problem table like any other, and a setup it gives
up on is killed, not left behind.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest

from clusterlaunch.controller.preflight import run_preflight
from clusterlaunch.core import setupguard
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.reports import host_problems
from clusterlaunch.transport.base import RemoteProcess
from clusterlaunch.transport.local import LocalConnection
from tests.unit.plans import two_local_hosts


class RefusingConnection:
    """A host whose connection cannot open another channel."""

    host = "b"

    def start(self, command: str, stdin: bytes = b"") -> RemoteProcess:
        raise TransportError("b", "cannot start a command: channel refused")

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        pass


def test_a_host_that_cannot_start_the_probe_is_a_problem_not_a_crash() -> None:
    connections = {"a": LocalConnection(), "b": RefusingConnection()}
    result = run_preflight(
        two_local_hosts("j-preflight", os.getcwd()), connections, None, need_torch=False, timeout=30
    )  # type: ignore[arg-type]
    assert [(p.host, p.detail) for p in result.problems] == [
        ("b", "cannot start the probe: cannot start a command: channel refused"),
    ]
    assert result.reports[0].static["executable"] == sys.executable


def _pgid_alive(pgid: int) -> bool:
    """A process of group ``pgid`` still runs (a zombie waiting for its parent does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def test_interrupted_preflight_kills_the_setup_it_gave_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal (here: an exception from the notice callback) while a setup hangs."""
    monkeypatch.setattr(setupguard, "SLOW_AFTER_S", 0.3)
    heard: list[str] = []

    class Interrupt(Exception):
        pass

    def notify(line: str) -> None:
        heard.append(line)
        raise Interrupt  # like the Ctrl-C handler raising StopJob

    connections = {"a": LocalConnection(), "b": LocalConnection()}
    plan = two_local_hosts("j-preflight", str(tmp_path), setup_b="echo $$ > pgid; sleep 600")
    with pytest.raises(Interrupt):
        run_preflight(plan, connections, None, False, timeout=60, notify=notify)  # type: ignore[arg-type]
    # The first notice comes 0.3 s in, or later on a busy machine.
    assert len(heard) == 1
    assert re.fullmatch(r"b: setup still running after \d+ s \(--setup-timeout 300\)", heard[0])
    pgid = int((tmp_path / "pgid").read_text())
    deadline = time.monotonic() + 10  # SIGTERM now, SIGKILL 2 s later; generous on a busy machine
    while _pgid_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _pgid_alive(pgid), "the setup's process group outlived the preflight"


@pytest.mark.cluster  # the shortest --setup-timeout is 1 s
def test_setup_past_its_limit_is_a_problem_naming_the_limit() -> None:
    connections = {"a": LocalConnection(), "b": LocalConnection()}
    result = run_preflight(
        two_local_hosts("j-preflight", os.getcwd(), setup_b="sleep 600"),
        connections,  # type: ignore[arg-type]
        None,
        need_torch=False,
        timeout=30,
        setup_timeout=1,
    )
    [problem] = result.problems
    assert problem.host == "b"
    assert problem.detail.startswith("setup did not finish within 1 s and was stopped;")


WORKER_IDENTICAL = "TORCH_ELASTIC_WORKER_IDENTICAL"


def test_torchrun_variables_are_named_with_where_they_came_from() -> None:
    static = {"torchrun_env": ["PET_TEE", WORKER_IDENTICAL]}
    shell = host_problems(static, {"PET_TEE": "3", WORKER_IDENTICAL: "1"}, "localhost inherits")
    assert shell == [
        "PET_TEE is set in this shell's environment, which localhost inherits; torchrun takes "
        "its options from PET_* variables, past clusterlaunch's checks: unset it, or give the "
        "option in --torchrun-args",
        f"{WORKER_IDENTICAL} is set in this shell's environment, which localhost inherits; it "
        "makes torchrun give wrong RANK and WORLD_SIZE (and a hang) when hosts run different "
        "process counts: unset it",
    ]
    # An SSH host's own (its login files, its setup:), whatever this shell holds.
    own = host_problems(static, {"PET_TEE": "3"})
    assert [line.split(";")[0] for line in own] == [
        "PET_TEE is set there (by its login files or setup:)",
        f"{WORKER_IDENTICAL} is set there (by its login files or setup:)",
    ]


def test_a_localhost_preflight_finds_this_shells_torchrun_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """localhost inherits the controller's environment: TORCH_ELASTIC_WORKER_IDENTICAL=1
    gave its ranks the wrong RANK and WORLD_SIZE, and the job hung."""
    monkeypatch.setenv(WORKER_IDENTICAL, "1")
    monkeypatch.delenv("PET_TEE", raising=False)
    connections = {"a": LocalConnection(), "b": LocalConnection()}
    plan = two_local_hosts("j-preflight", os.getcwd(), setup_b="export PET_TEE=3")
    result = run_preflight(plan, connections, None, need_torch=True, timeout=60)  # type: ignore[arg-type]
    said = [(p.host, text.split(";")[0]) for p in result.problems for text in p.detail.split("; ")]
    inherited = f"{WORKER_IDENTICAL} is set in this shell's environment, which localhost inherits"
    assert ("a", inherited) in said and ("b", inherited) in said, said
    assert ("b", "PET_TEE is set there (by its login files or setup:)") in said, said
