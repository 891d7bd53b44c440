"""``run -m`` and ``run --no-python`` as torchrun means them; the run id torchrun gets.

The launches themselves run on simulated hosts in tests/cluster/test_interface.py.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from clusterlaunch.cli.args import check_local_script
from clusterlaunch.cli.main import main
from clusterlaunch.core.checkplan import probe_command
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job
from clusterlaunch.remote import checks as probe


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.yaml").write_text("master_port: 29500\nhosts:\n  - {host: localhost, gpus: 2}\n")
    return tmp_path


def torchrun_tail(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    """The words after torchrun's --log-dir value in the planned command."""
    assert main(["run", "--dry-run", "--json", "--job-id", "j", *argv]) == 0, capsys.readouterr()
    words = shlex.split(json.loads(capsys.readouterr().out)["nodes"][0]["command"])
    return words[words.index("--log-dir") + 2 :]


def test_module_and_program_reach_torchrun(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert torchrun_tail(capsys, "-m", "h.yaml", "pkg.train", "--lr", "1") == [
        "--module", "--", "pkg.train", "--lr", "1",
    ]  # fmt: skip
    assert torchrun_tail(capsys, "--module", "h.yaml", "pkg.train") == [
        "--module", "--", "pkg.train",
    ]  # fmt: skip
    assert torchrun_tail(capsys, "--no-python", "h.yaml", "./run.sh", "-m") == [
        "--no-python", "--", "./run.sh", "-m",
    ]  # fmt: skip
    assert torchrun_tail(capsys, "h.yaml", "train.py", "-m") == ["--", "train.py", "-m"]


def test_a_double_dash_after_script_is_the_scripts(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torchrun's argparse drops a ``--`` right after SCRIPT; after the ``--`` that ends
    its options it keeps every word, so the script gets ``-- --lr 1`` as typed."""
    torchrun = pytest.importorskip("torch.distributed.run")  # its own parser judges
    for flags, script in (((), "train.py"), (("-m",), "pkg.train"), (("--no-python",), "./r")):
        argv = ["run", "--dry-run", "--json", "--job-id", "j", *flags, "h.yaml", script]
        assert main([*argv, "--", "--lr", "1", "--", "-m"]) == 0, capsys.readouterr()
        words = shlex.split(json.loads(capsys.readouterr().out)["nodes"][0]["command"])
        parsed = torchrun.get_args_parser().parse_args(
            words[words.index("torch.distributed.run") + 1 :]
        )
        given = [parsed.training_script, *parsed.training_script_args]
        assert given == [script, "--", "--lr", "1", "--", "-m"], flags


def test_the_run_id_is_the_job_id_unless_given(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--json", "--job-id", "j", "h.yaml", "t.py"]) == 0
    words = shlex.split(json.loads(capsys.readouterr().out)["nodes"][0]["command"])
    assert words[words.index("--rdzv-id") + 1] == "j"
    for given in ("--rdzv-id mine", "--rdzv_id=mine", "--rdzv-id=mine"):
        argv = ["run", "--dry-run", "--json", "--job-id", "j", f"--torchrun-args={given}"]
        assert main([*argv, "h.yaml", "t.py"]) == 0
        command = json.loads(capsys.readouterr().out)["nodes"][0]["command"]
        assert "mine" in command and " j " not in command.split("--log-dir")[0][-200:]
        assert shlex.split(command).count("--rdzv-id") == (1 if given == "--rdzv-id mine" else 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-m", "--no-python", "h.yaml", "x"], "argument --no-python: not allowed with argument"),
        (
            ["--torchrun-args=-m", "h.yaml", "x"],
            "-m is clusterlaunch's own -m; write clusterlaunch",
        ),
        (
            ["--torchrun-args=--no-python", "h.yaml", "x"],
            "--no-python is clusterlaunch's own --no-python",
        ),
        *(
            (["-m", "h.yaml", name], f"-m {name}: a module is named with dots (pkg.train), not a")
            for name in ("examples/train.py", "./train", ".train", "pkg..train", "pkg.")
        ),
    ],
)
def test_refused(
    work: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["run", "--dry-run", *argv]) == 2
    assert message in capsys.readouterr().err


def test_check_takes_them_too(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "-m", "h.yaml"]) == 2
    assert "-m: give the module after HOSTS" in capsys.readouterr().err


def plan_for(kind: str, script: str, workdir: str) -> tuple[object, LaunchOptions]:
    inventory = Inventory("h", (HostSpec(host="a", gpus=1, workdir=workdir),))
    options = LaunchOptions(script=script, script_kind=kind)  # type: ignore[arg-type]
    target = [SshTarget(alias="a", hostname="a")]
    kwargs = {"job_id": "j", "local_env": {}, "local_cwd": workdir, "agent_size": 1}
    return plan_job(inventory, target, options, **kwargs), options  # type: ignore[arg-type]


def test_local_checks(tmp_path: Path) -> None:
    here = str(tmp_path)
    plan, options = plan_for("module", "pkg.nowhere", here)
    check_local_script(plan, options, cwd=here)  # may be installed on the hosts only
    plan, options = plan_for("program", "nvidia-smi", here)
    check_local_script(plan, options, cwd=here)  # looked up in the hosts' PATH
    plan, options = plan_for("program", "./run.sh", here)
    with pytest.raises(UsageError, match=r"\./run\.sh: no such program here \(--no-python\)"):
        check_local_script(plan, options, cwd=here)
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    with pytest.raises(UsageError, match="not executable; chmod \\+x it"):
        check_local_script(plan, options, cwd=here)
    (tmp_path / "run.sh").chmod(0o755)
    check_local_script(plan, options, cwd=here)
    (tmp_path / "tools").mkdir()
    plan, options = plan_for("program", "./tools", here)
    with pytest.raises(UsageError, match=r"\./tools: a directory; name the program in it"):
        check_local_script(plan, options, cwd=here)
    plan, options = plan_for("file", "missing.py", here)
    with pytest.raises(UsageError, match=r"missing\.py: no such script here"):
        check_local_script(plan, options, cwd=here)


def test_probe_command_asks_for_the_right_check() -> None:
    plan, _ = plan_for("module", "pkg.train", "/w")
    node = plan.nodes[0]  # type: ignore[attr-defined]
    words = shlex.split(probe_command(node, "a", 0, "n", "pkg.train", True, 9, 5, "j", "module"))
    assert words[words.index("--module") + 1] == "pkg.train" and "--script" not in words
    words = shlex.split(probe_command(node, "a", 0, "n", "./run.sh", True, 9, 5, "j", "program"))
    assert words[words.index("--program") + 1] == "./run.sh"


def test_the_probes_module_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""A package."""\n# nothing runs\n')
    (tmp_path / "pkg" / "train.py").write_text("")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "__main__.py").write_text("")
    (tmp_path / "spaced").mkdir()  # a namespace package: no __init__.py
    (tmp_path / "spaced" / "train.py").write_text("")
    (tmp_path / "plain.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # python -c puts the workdir first, as -m does
    assert probe.module_problem("pkg.train") is None
    assert probe.module_problem("app") is None  # python -m app runs app/__main__.py
    assert probe.module_problem("spaced.train") is None
    assert probe.module_problem("json.tool") is None  # installed for the hosts' Python
    assert "no module 'pkg.nope' for" in probe.module_problem("pkg.nope")
    assert "no module 'spaced.nope' for" in probe.module_problem("spaced.nope")
    assert "'pkg' is a package without __main__.py" in probe.module_problem("pkg")
    assert "no module 'mypkg.train' for" in probe.module_problem("mypkg.train")
    assert "(no 'mypkg'); check the name" in probe.module_problem("mypkg.train")
    assert "'plain' is not a package" in probe.module_problem("plain.train")


def test_a_module_below_nested_namespace_packages_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below a namespace package in a namespace package every name was undecided (its
    _NamespacePath recomputed itself from a parent never imported): ``-m nsp.sub.nothere`` and
    ``-m nsp.sub`` (no __main__) passed the preflight, and torchrun failed on every rank."""
    (tmp_path / "nsp" / "sub").mkdir(parents=True)  # no __init__.py anywhere
    (tmp_path / "nsp" / "sub" / "modx.py").write_text("")
    (tmp_path / "nsp" / "sub" / "app").mkdir()
    (tmp_path / "nsp" / "sub" / "app" / "__main__.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert probe.module_problem("nsp.sub.modx") is None
        assert probe.module_problem("nsp.sub.app") is None
        assert "no module 'nsp.sub.nothere' for" in probe.module_problem("nsp.sub.nothere")
        assert "'nsp.sub' is a package without __main__.py" in probe.module_problem("nsp.sub")
    finally:  # imported for real (they run no code): not left for other tests
        for name in ("nsp.sub.app", "nsp.sub", "nsp"):
            sys.modules.pop(name, None)


def test_the_module_check_runs_no_code_of_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """find_spec ran each package's __init__ in the agent: a print garbled its channel,
    os.environ["LOCAL_RANK"] and sys.exit refused a job torchrun runs, an import of torch
    stayed loaded for the whole job. Where only that code could tell, torchrun decides."""
    inits = {
        "chatty": 'print("chatty: loading config")\n',
        "envpkg": 'import os\nLOCAL_RANK = int(os.environ["LOCAL_RANK"])\n',
        "exitpkg": 'import sys\nsys.exit("exitpkg: run me under torchrun")\n',
        "heavy": "import heavydep\n",
        "extended": "__path__.append(__path__[0] + '/more')\n",
    }
    for name, init in inits.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(init)
        (tmp_path / name / "train.py").write_text("")
    (tmp_path / "extended" / "more").mkdir()
    (tmp_path / "extended" / "more" / "extra.py").write_text("")
    (tmp_path / "heavydep.py").write_text('print("heavydep imported")\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    for name in inits:
        assert probe.module_problem(f"{name}.train") is None, name
        assert probe.module_problem(f"{name}.nope") is None, name  # its __init__ could add it
        assert probe.module_problem(name) is None, name  # could its __init__ add __main__?
    assert probe.module_problem("extended.extra") is None  # found only once __init__ ran
    assert [name for name in [*inits, "heavydep"] if name in sys.modules] == []
    assert capfd.readouterr().out == ""


def test_the_probes_program_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    assert "is not executable; chmod +x it" in probe.program_problem("./run.sh")
    (tmp_path / "run.sh").chmod(0o755)
    assert probe.program_problem("./run.sh") is None
    assert "program './nope.sh' not found in" in probe.program_problem("./nope.sh")
    (tmp_path / "tools").mkdir()
    assert "program './tools' in " in probe.program_problem("./tools")
    assert probe.program_problem("./tools").endswith("is a directory; name the program in it")
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    assert probe.program_problem(os.path.basename(sys.executable)) is None
    assert "not found in PATH" in probe.program_problem("run.sh")  # no ./: PATH only


def test_node_0s_listener_answers_then_stops_with_its_thread() -> None:
    """The agent forks the job right after the check: no serving thread may be left by then."""
    import threading

    listener = probe.open_listener(0)
    port = listener.getsockname()[1]
    before = threading.active_count()
    serving = probe.start_serving(listener, b"n0nce", 5.0)
    assert threading.active_count() == before + 1
    assert probe.dial("127.0.0.1", port, b"n0nce", 5.0) is None
    serving.stop()
    assert threading.active_count() == before
    assert listener.fileno() == -1  # closed
    probe.start_serving(None, b"n0nce", 5.0).stop()  # other nodes: nothing to stop


def test_node_0s_listener_answers_ipv4_and_ipv6_diallers() -> None:
    """Bound as torchrun's store binds (``[::]`` dual-stack): a master name that resolves to
    IPv6 alone was checked against an IPv4-only listener, refused on every node."""
    import socket

    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    listener = probe.open_listener(0)
    port = listener.getsockname()[1]
    serving = probe.start_serving(listener, b"n0nce", 5.0)
    try:
        assert probe.dial("127.0.0.1", port, b"n0nce", 5.0) is None
        assert probe.dial("::1", port, b"n0nce", 5.0) is None
    finally:
        serving.stop()
    refused = probe.dial("::1", port, b"n0nce", 5.0)
    assert refused is not None and refused.startswith(f"cannot connect to [::1]:{port}: ")


def test_a_directory_with_main_or_a_zipapp_is_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``python DIR`` runs DIR/__main__.py and ``python app.pyz`` the zipapp: both are scripts,
    for the local check and the hosts' preflight alike; a directory without one is neither."""
    import zipapp

    here = str(tmp_path)
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("print('hi')\n")
    zipapp.create_archive(tmp_path / "app", tmp_path / "app.pyz")
    (tmp_path / "empty").mkdir()
    for script in ("app", "app.pyz", "app/"):
        plan, options = plan_for("file", script, here)
        check_local_script(plan, options, cwd=here)
    plan, options = plan_for("file", "empty", here)
    with pytest.raises(UsageError, match=r"^empty: a directory without __main__\.py here; "):
        check_local_script(plan, options, cwd=here)
    monkeypatch.chdir(tmp_path)
    for script in ("app", "app.pyz"):
        assert probe.static_checks(_args(script))["script_found"] is True
        assert probe.script_problem(script) is None
    assert "'empty' in " in probe.script_problem("empty")
    assert "is a directory without __main__.py" in probe.script_problem("empty")
    assert probe.static_checks(_args("nope"))["script_found"] is False


def _args(script: str) -> object:
    fields = {"accelerator": None, "need_torch": False, "module": None, "program": None}
    return type("Args", (), {**fields, "script": script, "job_id": None})()
