"""Remote programs are shipped as one self-contained source: no package imports left."""

from __future__ import annotations

import ast
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from clusterlaunch.remote import BUNDLES, _module_bytes, program_source


def top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_agent_compiles_and_is_self_contained() -> None:
    source = program_source("agent")
    assert isinstance(source, bytes)
    code = compile(source, "clusterlaunch-agent", "exec")
    assert code is not None
    text = source.decode("utf-8")
    assert "from clusterlaunch" not in text
    assert "import clusterlaunch" not in text
    assert "# bundle: strip" not in text
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.module is None or not node.module.startswith("clusterlaunch"), ast.unparse(
                node
            )
            assert node.level == 0, ast.unparse(node)
        if isinstance(node, ast.Import):
            assert all(not alias.name.startswith("clusterlaunch") for alias in node.names)
    assert {
        "Agent",
        "TreeKiller",
        "RankTail",
        "parse_root_cause",
        "JobRecord",
        "main",
    } <= top_level_names(tree)


def test_agent_bundle_order() -> None:
    text = program_source("agent").decode()
    positions = [
        text.index(f"def {name}") if name == "parse_root_cause" else text.index(f"class {name}")
        for name in ("TreeKiller", "parse_root_cause", "RankTail", "Agent")
    ]
    assert positions == sorted(positions)  # helpers defined before the agent uses them


def test_probe_compiles() -> None:
    source = program_source("probe")
    compile(source, "clusterlaunch-probe", "exec")
    assert b"from clusterlaunch" not in source


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_no_two_modules_of_a_bundle_define_one_name(name: str) -> None:
    """A bundle is one namespace: a second ``_which`` (remote/hostlimits.py's, after
    accel.py's) replaced the first, and the device search called it with no tool."""
    owners: dict[str, list[str]] = {}
    for module in BUNDLES[name]:
        for defined in top_level_names(ast.parse(_module_bytes(module))):
            owners.setdefault(defined, []).append(module)
    assert {n: mods for n, mods in owners.items() if len(mods) > 1} == {}


def test_unknown_program() -> None:
    with pytest.raises(ValueError, match="unknown remote program 'nope'"):
        program_source("nope")


def test_agent_size_is_stable() -> None:
    assert program_source("agent") == program_source("agent")
    assert "agent" in BUNDLES and "probe" in BUNDLES


def test_bundled_root_cause_matches_module() -> None:
    namespace: dict[str, object] = {"__name__": "bundled"}
    source = program_source("agent")
    exec(
        compile(source, "clusterlaunch-agent", "exec"), namespace
    )  # defines only; main() is guarded
    parse = namespace["parse_root_cause"]
    text = (
        "Root Cause (first observed failure):\n[0]:\n  host      : h\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : 2 (pid: 3)\n====\n"
    )
    assert parse(text) == {  # type: ignore[operator]
        "rank": 1,
        "local_rank": 1,
        "exitcode": 2,
        "pid": 3,
        "signal": None,
        "host": "h",
        "error_file": None,
    }


def test_one_module_binds_the_remote_programs_listeners() -> None:
    """The doctor bundle had a copy of the preflight's dual-stack bind (remote/checks.py,
    which it does not bundle): both now ship remote/listener.py."""
    remote = Path(__file__).resolve().parents[2] / "clusterlaunch"
    binding = sorted(
        path.name for path in (remote / "remote").glob("*.py") if "IPV6_V6ONLY" in path.read_text()
    )
    assert binding == ["listener.py"]
    assert all("listener" in BUNDLES[name] for name in ("agent", "probe", "doctor"))


def test_the_doctor_bundle_answers_ipv4_and_ipv6_diallers() -> None:
    """The doctor's ephemeral port, bound by the bundled listener: dual-stack, as the
    preflight's (a peer that reaches this host by IPv6 is answered too)."""
    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    namespace: dict[str, Any] = {"__name__": "bundled"}  # defines only; main() is guarded
    exec(compile(program_source("doctor"), "clusterlaunch-doctor", "exec"), namespace)
    listener = namespace["open_listener"](0)
    port = listener.getsockname()[1]
    stop = threading.Event()
    serving = threading.Thread(target=namespace["answer"], args=(listener, b"n0nce", stop))
    serving.start()
    try:
        for address in ("127.0.0.1", "::1"):
            error, _ = namespace["dial"](address, port, b"n0nce", 5.0)
            assert error is None, error
    finally:
        stop.set()
        serving.join()
        listener.close()
