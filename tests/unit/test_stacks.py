"""Stack dumps: rendering, finding workers in a real process tree, the stall watch."""

from __future__ import annotations

import ast
import importlib.metadata
import io
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.controller.console import Console
from clusterlaunch.controller.output import OutputRouter
from clusterlaunch.controller.stall import Stacks, StallWatch, watch_for_stalls
from clusterlaunch.controller.supervisor import Supervisor
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.lines import Prefixes
from clusterlaunch.core.stacks import StackDump, dumps_from_records, prefixes_for, stacks_text
from clusterlaunch.remote import checks, hostfacts, program_source, torchfiles
from clusterlaunch.remote.proctree import descendants
from clusterlaunch.remote.stacks import (
    dump,
    find_py_spy,
    job_workers,
    one_line_command,
    torchrun_pids,
)
from clusterlaunch.remote.storewait import MARK, program
from clusterlaunch.testing.agentscript import FakeAgent, Pause, exits, rank_output, started
from clusterlaunch.testing.fakes import FakeClock, FakeConnection
from tests.unit.plans import two_ranks_per_host

STACK = (
    'Thread 10 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:3252)\n'
)


def test_stack_lines_carry_the_workers_output_prefix() -> None:
    dumps = [
        StackDump("node1", 1, 0, 11, None, "py-spy dump failed (exit 1): Permission denied"),
        StackDump("node0", 0, 0, 10, STACK),
    ]
    records = [("node0", {"event": "stack", **vars(d)}) for d in dumps]
    ordered = dumps_from_records(records + records)  # duplicates (shared machine) collapse
    assert [d.rank for d in ordered] == [0, 1]
    text = stacks_text(
        ordered,
        [("node2", "py-spy is not installed")],
        prefixes_for(
            [StackDump("node0", 0, 0, 10, STACK), StackDump("node1", 1, 0, 11, None)],
            ["node0", "node1", "node2"],
            color=False,
        ),
    )
    assert text.decode().splitlines() == [
        '[r0 node0:0] Thread 10 (idle): "MainThread"',
        "[r0 node0:0]     all_reduce (torch/distributed/distributed_c10d.py:3252)",
        "[r1 node1:0] (pid 11) no stack: py-spy dump failed (exit 1): Permission denied",
        "[node2]      py-spy is not installed",
    ]


def test_workers_are_torchruns_own_children_not_what_they_started() -> None:
    """agent (a subreaper) -> torchrun stand-in -> two workers (RANK set). Rank 5 starts a
    child (a DataLoader worker) and a double-forked daemon, re-parented to the agent: both
    inherit RANK. The daemon was a second stack of rank 5 (or, a ``sleep``, a failed dump)."""
    worker = (
        "import os,subprocess,sys,time\n"
        "if sys.argv[1] == '1':\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30)\n"
        "        os._exit(0)\n"
        "time.sleep(30)\n"
    )
    launcher = (
        "import os,subprocess,sys,time\n"
        "procs=[subprocess.Popen([sys.executable,'-c',sys.argv[2],str(r)],"
        "env={**os.environ,'RANK':str(r+4),'LOCAL_RANK':str(r)}) for r in (1,0)]\n"
        "time.sleep(30)\n"
    )
    agent = (
        "import subprocess,sys\n"
        "from clusterlaunch.remote.proctree import become_subreaper\n"
        "become_subreaper()\n"
        "subprocess.run([sys.executable,'-c',sys.argv[1],'torch.distributed.run',sys.argv[2]])\n"
    )
    root = subprocess.Popen([sys.executable, "-c", agent, launcher, worker])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(descendants(root.pid)) < 5:
            time.sleep(0.1)
        assert len(descendants(root.pid)) == 5  # launcher, workers, child, daemon
        found = job_workers(root.pid)
        assert [(rank, local) for _, rank, local in found] == [(4, 0), (5, 1)]
    finally:
        for pid in descendants(root.pid):  # only what this test started
            os.kill(pid, 9)
        root.kill()
        root.wait()


def test_torchrun_is_found_as_either_node_starts_it() -> None:
    """Before it has workers (a rendezvous waiting), ``stacks`` dumps torchrun itself:
    node 0's ``-m torch.distributed.run`` and the others' ``-c`` (remote/storewait.py)."""
    waiting = f"{MARK}\nimport time\ntime.sleep(30)\n"  # program()'s first line, then a wait
    starts = [
        [sys.executable, "-c", "import time; time.sleep(30)", "torch.distributed.run"],
        [sys.executable, "-c", waiting, "--node-rank", "1"],
        [sys.executable, "-c", "import time; time.sleep(30)"],  # not torchrun
    ]
    procs = [subprocess.Popen(argv) for argv in starts]
    try:
        deadline = time.monotonic() + 10
        found: list[int] = []
        while time.monotonic() < deadline and len(found) < 2:
            time.sleep(0.1)
            found = torchrun_pids(os.getpid())
        assert sorted(found) == sorted(proc.pid for proc in procs[:2])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert program(3).startswith(MARK + "\n")


def test_stall_watch_dumps_once_and_kills_with_its_own_status() -> None:
    err = io.BytesIO()
    router = OutputRouter(Prefixes([(0, "node0", 0)], ["node0"], False), Console(io.BytesIO(), err))
    calls = []

    def take(plan: object, connections: object, give_up: object) -> Stacks:
        calls.append(1)
        return [StackDump("node0", 0, 0, 10, STACK)], []

    plan = two_ranks_per_host(["node0"])
    clock = FakeClock(now=100.0)
    watch = StallWatch(5, "kill", plan, {}, clock=clock, take=take, background=_at_once)
    clock.advance(4)
    assert watch.check(router) is None
    watch.heard()
    clock.advance(4)
    assert watch.check(router) is None  # 4 s since the last output
    clock.advance(1.5)
    outcome = watch.check(router)
    assert outcome is not None and outcome.exit_code == ExitStatus.STALLED == 125
    clock.advance(100)
    assert watch.check(router) is None and calls == [1]  # once
    assert b"[r0 node0:0]     all_reduce (torch/" in err.getvalue()


def _one_stack(plan: object, connections: object, give_up: object) -> Stacks:
    return [StackDump("a", 0, 0, 10, STACK)], []


def _at_once(call: Callable[[], Stacks]) -> Future[Stacks]:
    """Runs the stall watch's ``take`` right away, as if its thread were instant."""
    future: Future[Stacks] = Future()
    future.set_result(call())
    return future


def test_the_stall_watch_keeps_the_loop_going_while_the_stacks_are_taken() -> None:
    """A host's slow setup held the supervisor's loop for as long (25 s in the report):
    output waited and --timeout fired late. The stacks come from a thread now."""
    release, given_up = threading.Event(), threading.Event()

    def slow(plan: object, connections: object, give_up: threading.Event) -> Stacks:
        release.wait(30)
        return [StackDump("node0", 0, 0, 10, STACK)], []

    def until_given_up(plan: object, connections: object, give_up: threading.Event) -> Stacks:
        if give_up.wait(30):
            given_up.set()
        return [], []

    err = io.BytesIO()
    router = OutputRouter(Prefixes([(0, "node0", 0)], ["node0"], False), Console(io.BytesIO(), err))
    clock = FakeClock(now=100.0)
    watch = StallWatch(5, "kill", two_ranks_per_host(["node0"]), {}, clock=clock, take=slow)
    clock.advance(6)
    began = time.monotonic()
    assert watch.check(router) is None and watch.check(router) is None
    assert time.monotonic() - began < 1.0  # did not wait for the stacks
    assert b"no rank has printed for 5 s" in err.getvalue() and b"all_reduce" not in err.getvalue()
    release.set()
    deadline = time.monotonic() + 10
    outcome = None
    while outcome is None and time.monotonic() < deadline:
        outcome = watch.check(router)
    assert outcome is not None and outcome.exit_code == ExitStatus.STALLED
    assert b"[r0 node0:0]     all_reduce (torch/" in err.getvalue()
    plan = two_ranks_per_host(["node0"])
    second = StallWatch(5, "stacks", plan, {}, clock=clock, take=until_given_up)
    clock.advance(6)
    assert second.check(router) is None
    second.abandon(router)  # the job ended first: told to give up, and waited for
    assert given_up.is_set()
    # The stacks promised never came: said so, not left unexplained.
    assert err.getvalue().endswith(b"the job ended before the stacks were taken: given up\n")
    watch.abandon(router)  # its stacks were shown: nothing to say
    assert err.getvalue().count(b"given up") == 1


@pytest.mark.parametrize("action", ["stacks", "kill"])
def test_the_supervisor_acts_on_silence_only(action: str) -> None:
    """Output keeps the watch quiet; then silence: stacks once, and kill stops the job (125)."""
    clock = FakeClock(tick=0.1)
    agents = {
        "a": FakeAgent([started(), rank_output(0, b"step\n"), Pause(100), *exits(0)]),
        "b": FakeAgent([started(), rank_output(2, b"step\n"), Pause(100), *exits(0)]),
    }
    plan = two_ranks_per_host(list(agents))
    hosts = {name: FakeConnection(name, agent, clock) for name, agent in agents.items()}
    ranks = [(r, n.host, r - (n.first_rank or 0)) for n in plan.nodes for r in n.global_ranks]
    err = io.BytesIO()
    router = OutputRouter(Prefixes(ranks, list(agents), False), Console(io.BytesIO(), err))
    watch = StallWatch(2.0, action, plan, {}, clock=clock, take=_one_stack, background=_at_once)
    check = watch_for_stalls(watch, router)
    outcome = Supervisor(plan, hosts, router, clock=clock, stall_check=check).run()  # type: ignore[arg-type]
    text = err.getvalue().decode()
    assert watch.fired
    assert "no rank has printed for 2 s (--stall-timeout)" in text
    assert text.count("[r0 a:0]     all_reduce (torch/") == 1
    if action == "kill":
        assert outcome.exit_code == ExitStatus.STALLED and outcome.stopped
        assert bytes(hosts["a"].process.received).replace(b"h", b"") == b"t"
    else:
        assert outcome.exit_code == 0, text


def test_nvidia_smi_rows_are_parsed() -> None:
    gpus = hostfacts.parse_gpu_query("0, NVIDIA H100 80GB HBM3, 550.54.15, 1234, 81559\n")
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "driver": "550.54.15",
            "memory_used_mib": 1234,
            "memory_total_mib": 81559,
        }
    ]
    apps = hostfacts.parse_apps_query("GPU-5d2c, 4242, python, 1200\n")
    assert apps == [{"gpu_uuid": "GPU-5d2c", "pid": 4242, "name": "python", "memory_mib": 1200}]


def test_torch_version_file_is_read_without_importing_torch() -> None:
    text = "__version__ = '2.3.0+cu121'\ncuda: Optional[str] = '12.1'\nhip: Optional[str] = None\n"
    assert torchfiles.assigned(text, "__version__") == "2.3.0+cu121"
    assert torchfiles.assigned(text, "cuda") == "12.1"
    assert torchfiles.assigned(text, "hip") is None
    tricky = 'cuda_home = "/x"\ncuda = "12.4"  # comment\nxcuda = "no"\n__version__ = "2.5"\n'
    assert torchfiles.assigned(tricky, "cuda") == "12.4"  # not cuda_home's, and not a prefix
    assert torchfiles.assigned(tricky, "__version__") == "2.5"
    assert torchfiles.assigned("__version__ = get()\n", "__version__") is None
    assert torchfiles.assigned("", "cuda") is None


def test_the_checks_read_the_version_of_the_torch_this_python_has() -> None:
    # The file and the installed distribution agree (or both say there is no torch).
    try:
        installed: str | None = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    assert torchfiles.torch_files()["torch"] == installed
    assert checks.torch_version() == installed


def test_doctor_and_jobctl_bundles_compile_without_package_imports() -> None:
    for name in ("doctor", "jobctl"):
        tree = ast.parse(program_source(name).decode())
        modules = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in modules if m and m.startswith(("clusterlaunch", "__future__"))]
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert {"main", "host_facts" if name == "doctor" else "job_stacks"} <= names


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stacks", "h.yaml", "bad id!"], "JOB_ID 'bad id!': use 1-64 letters"),
        (["run", "--stall-action", "kill", "h.yaml", "t.py"], "give --stall-timeout SECONDS"),
        (["run", "--stall-timeout", "0", "h.yaml", "t.py"], "--stall-timeout '0': use a number"),
        (["doctor", "--bandwidth", "missing.yaml"], "missing.yaml: no such file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitStatus.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clusterlaunch: error: ") and message in err


def test_a_multi_line_command_is_one_header_line() -> None:
    dumped = "Process 7: python -c # wrapper\nimport os\nos.exec()\nPython v3.11.7 (/p)\n\nThread 7"
    assert (
        one_line_command(dumped)
        == "Process 7: python -c # wrapper ...\nPython v3.11.7 (/p)\n\nThread 7"
    )
    plain = "Process 7: python train.py\nPython v3.11.7 (/p)\n"
    assert one_line_command(plain) == plain


def test_py_spy_dumps_a_python_c_wrapper_with_a_one_line_header() -> None:
    py_spy = find_py_spy()
    if py_spy is None:
        pytest.skip("py-spy is not installed")
    code = "# wrapper\nimport time\nfor _ in range(600):\n    time.sleep(0.1)\n"
    sleeper = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(0.5)
        text, error = dump(py_spy, sleeper.pid, 20)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert error is None and text is not None
    head = text.splitlines()
    assert head[0].endswith("-c # wrapper ...") and head[1].startswith("Python v"), text
    assert "time.sleep" not in head[0] and any("<module>" in line for line in head), text
