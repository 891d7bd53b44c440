"""The dry-run plan of representative hosts files, compared with recorded output.

The expected files in ``tests/unit/data/dryrun/`` were written by the code of
branch ``i11-layout`` (before the plan-once and single-places changes of issue
11), so any change to what a host would run shows up here. Four things vary by
machine and are written as placeholders: this directory (``{cwd}``, the default
workdir), the controller's Python (``{python}``, the default for localhost), the
login shell in the srun note (``{shell}``), and the size of the agent as sent
(``{agent_size}``, which changes with every edit of the agent's source and with
the controller's Python, not with the plan).

To record them again (only when a change of the plan is intended)::

    python tests/unit/test_dry_run_golden.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest

from clusterlaunch.cli import main as cli
from clusterlaunch.controller.output import Console
from clusterlaunch.remote import program_payload
from clusterlaunch.transport.local import login_shell

DATA = Path(__file__).parent / "data" / "dryrun"
INPUTS = ("ssh_config", "local.yaml", "three.yaml", "fields.yaml", "mpi.txt", "train.py")
_SLURM_ENV = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_ID": "7"}
_JOB = ("--job-id", "j1", "--ssh-config", "ssh_config")

# name (and expected file): argv, environment
CASES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "local.json": (("run", "--dry-run", "--json", *_JOB, "local.yaml", "train.py"), {}),
    "three.json": (
        (
            "run", "--dry-run", "--json", *_JOB, "--env", "A=1 2", "--forward-env", "CLTEST_*",
            "--torchrun-args=--max-restarts 3", "--grace", "2.5", "--heartbeat-timeout", "30",
            "--setup-timeout", "20", "three.yaml", "train.py", "--lr", "3e-4", "--", "x y",
        ),
        {"CLTEST_FLAG": "on"},
    ),
    "fields.json": (
        ("run", "--dry-run", "--json", *_JOB, "--master-port", "1234", "fields.yaml", "train.py"),
        {},
    ),
    "mpi.json": (
        ("run", "--dry-run", "--json", *_JOB, "--python", "/usr/bin/python3", "mpi.txt", "t.py"),
        {},
    ),
    "slurm.json": (("run", "--dry-run", "--json", "--job-id", "j1", "slurm", "t.py"), _SLURM_ENV),
    "three.txt": (("run", "--dry-run", *_JOB, "three.yaml", "train.py"), {}),
    "exec.txt": (("exec", "--dry-run", *_JOB, "three.yaml", "--", "hostname", "-f"), {}),
    "slurm-exec.txt": (("exec", "--dry-run", "--job-id", "j1", "slurm", "--", "nproc"), _SLURM_ENV),
    # --sync: what would be copied (the inputs above, in {cwd}), one more line / field
    "sync.txt": (("run", "--dry-run", "--sync", *_JOB, "three.yaml", "train.py"), {}),
    "sync.json": (("run", "--dry-run", "--json", "--sync", *_JOB, "local.yaml", "train.py"), {}),
}  # fmt: skip


def dry_run(argv: tuple[str, ...], env: dict[str, str], cwd: Path) -> str:
    """The dry run's stdout from ``cwd`` (holding the inputs), with the placeholders put in."""
    for name in INPUTS:
        shutil.copy(DATA / name, cwd / name)
    out, err = io.BytesIO(), io.BytesIO()
    here = os.getcwd()
    try:
        os.chdir(cwd)
        console = Console(out, err)
        with mock.patch.dict(os.environ, env), mock.patch.object(cli, "Console", lambda: console):
            code = cli.main(list(argv))
    finally:
        os.chdir(here)
    assert code == 0, err.getvalue()
    return _placeholders(out.getvalue().decode(), cwd)


def _placeholders(text: str, cwd: Path) -> str:
    size = str(len(program_payload("agent")))
    text = text.replace(f"os.read(0,{size}-len(b))", "os.read(0,{agent_size}-len(b))")
    text = text.replace(f"len(b)<{size},", "len(b)<{agent_size},")
    text = text.replace(f" {login_shell()} -c COMMAND", " {shell} -c COMMAND")  # the srun note
    return text.replace(str(cwd), "{cwd}").replace(sys.executable, "{python}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_dry_run_matches_recorded_plan(name: str, tmp_path: Path) -> None:
    argv, env = CASES[name]
    got = dry_run(argv, env, tmp_path.resolve())
    expected = (DATA / "expected" / name).read_text()
    if name.endswith(".json"):
        assert json.loads(got) == json.loads(expected)
    assert got == expected


def _record() -> None:
    (DATA / "expected").mkdir(exist_ok=True)
    for name, (argv, env) in CASES.items():
        with tempfile.TemporaryDirectory() as tmp:
            text = dry_run(argv, env, Path(tmp).resolve())
        (DATA / "expected" / name).write_text(text)
        print(f"recorded {name}")


if __name__ == "__main__":
    _record()
