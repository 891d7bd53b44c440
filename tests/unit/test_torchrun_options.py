"""The preflight knows the options of each host's torchrun, read from its run.py.

An option that torchrun does not have (a typo in --torchrun-args, an option of a
newer torch, or one clusterlaunch passes that an old torch lacks) made every host
print torchrun's usage, and the job end with 2 after it started.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

from clusterlaunch.core import commands, torchrunargs
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.render import jobs_text
from clusterlaunch.core.reports import RemoteJob
from clusterlaunch.core.torchrunargs import user_command
from clusterlaunch.remote import torchfiles

RUN_PY = """
import argparse
from torch.distributed.argparse_util import check_env, env
def get_args_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nnodes", action=env, type=str, default="1:1")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", action=env, default="1")
    parser.add_argument("--standalone", action=check_env)
    parser.add_argument("-m", "--module", action=check_env)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--start-method", action=env, choices=["spawn", "fork"])
    parser.add_argument("--redirects", "-r", action=env, default="0")
    parser.add_argument("--none-taken", nargs=0)
    return parser
"""


@pytest.fixture
def fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "torch" / "distributed").mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_text("__version__ = '9.9.9'\n")
    (tmp_path / "torch" / "distributed" / "run.py").write_text(RUN_PY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return tmp_path


def _job(*options: str) -> list[str]:
    return ["py", "-m", "torch.distributed.run", *options, "train.py", "--bogus", "-x"]


def test_options_come_from_run_py(fake_torch: Path) -> None:
    arguments = torchfiles.torchrun_arguments()
    assert arguments is not None
    assert arguments[1:] == [
        (("--nnodes",), False, None),
        (("--nproc-per-node", "--nproc_per_node"), False, None),
        (("--standalone",), True, None),
        (("-m", "--module"), True, None),
        (("--quiet",), True, None),
        (("--start-method",), False, ["spawn", "fork"]),
        (("--redirects", "-r"), False, None),
        (("--none-taken",), True, None),
    ]


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (["--nnodes", "2", "--nproc-per-node", "4"], None),
        (["--nnodes=2", "--nproc_per_node=4", "--standalone", "--quiet"], None),
        (["--nnodes", "-a b"], None),  # a word with a space is a value to argparse
        (["--nn", "2", "-r3", "-m", "--start-method", "fork"], None),
        (["--role", "x", "--"], "unrecognized arguments: --role"),
        (["--bogus", "1"], "unrecognized arguments: --bogus"),
        (["--nnodes", "-."], "argument --nnodes: expected one argument"),
        (["--quiet=1"], "argument --quiet: ignored explicit argument '1'"),
        (["--start-method", "spwan"], "argument --start-method: invalid choice: 'spwan'"),
        (["-x"], "unrecognized arguments: -x"),
        (["--n", "2"], "ambiguous option: --n could match"),
    ],
)
def test_this_pythons_argparse_says_what_torchrun_would_refuse(
    fake_torch: Path, options: list[str], refusal: str | None
) -> None:
    said = torchfiles.torchrun_problem(_job(*options), "9.9.9")
    if refusal is None:
        assert said is None
    else:
        assert said is not None and refusal in said, said


def test_the_problem_names_the_hosts_torch_and_what_argparse_said(fake_torch: Path) -> None:
    assert torchfiles.torchrun_problem(_job("--bogus", "1"), "9.9.9") == (
        "torchrun here (torch 9.9.9) refuses its options: unrecognized arguments: --bogus; "
        "see python -m torch.distributed.run --help"
    )
    assert torchfiles.torchrun_problem(_job("--nnodes", "1"), "9.9.9") is None


def test_no_torch_no_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")  # and no distributed/run.py
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert torchfiles.torchrun_arguments() is None
    assert torchfiles.torchrun_problem(_job("--bogus"), "9.9.9") is None


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_every_option_clusterlaunch_passes_is_known_to_the_installed_torch() -> None:
    spec = commands.TorchrunSpec(
        python="py", nnodes=2, nproc=2, node_rank=1, master_addr="a", master_port=1,
        log_dir="/tmp/l", extra_args=("--max-restarts", "3", "--start-method=spawn"),
        script="train.py", script_args=("--lr", "1"), run_id="j1", script_kind="module",
    )  # fmt: skip
    assert torchfiles.torchrun_problem(commands.torchrun_argv(spec), "2.13") is None


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_the_list_of_torchrun_options_is_the_installed_torchs() -> None:
    from torch.distributed.run import get_args_parser

    long = {o.replace("_", "-") for a in get_args_parser()._actions for o in a.option_strings}
    assert set(torchrunargs.TORCHRUN_OPTIONS) == {o for o in long if o.startswith("--")}
    assert set(torchrunargs.OWNED_TORCHRUN_OPTIONS) < set(torchrunargs.TORCHRUN_OPTIONS)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
@pytest.mark.parametrize(
    "given",
    [
        "--max-restarts -1",
        "--max_r=-2",
        "--shutdown-timeout -1",
        "--rdzv-conf x",
        "--rdzv-conf timeout=",
        "--rdzv-conf =3",
        "--rdzv-conf a=1,,b=2",
    ],
)
def test_values_torchrun_refuses_at_its_start_are_refused_here(given: str) -> None:
    """The installed torchrun parses them, then refuses them in config_from_args, which
    runs on every host once the job has started; here they are one line, exit 2."""
    from torch.distributed.run import config_from_args, get_args_parser

    parsed = get_args_parser().parse_args([*shlex.split(given), "t.py"])
    with pytest.raises((AssertionError, ValueError)):
        config_from_args(parsed)
    with pytest.raises(UsageError, match="--torchrun-args: "):
        torchrunargs.parse_torchrun_args(given)


def test_values_torchrun_takes_pass() -> None:
    given = (
        "--max-restarts 0 --shutdown-timeout=0 --monitor_interval 0.01 --rdzv-conf a=1,timeout=9"
    )
    assert torchrunargs.parse_torchrun_args(given) == tuple(shlex.split(given))


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            "/v/bin/python -m torch.distributed.run --nnodes 3 --nproc-per-node 1 --node-rank 0 "
            "--rdzv-backend static --rdzv-id j --master-addr 10.0.0.1 --master-port 29500 "
            "--redirects 3 --log-dir /tmp/x --max-restarts 2 train.py --epochs 2",
            "train.py --epochs 2",
        ),
        ("p -m torch.distributed.run --nnodes 1 --module pkg.train --lr 1", "-m pkg.train --lr 1"),
        ("/v/bin/torchrun --nnodes 1 --no-python --redirects 3 sh -c x", "sh -c x"),
        ("p -m torch.distributed.run --nnodes 1 -- --odd.py -v", "--odd.py -v"),
        # as clusterlaunch starts it: "--" ends torchrun's options, the script's "--" stays
        ("p -m torch.distributed.run --log-dir /l -- t.py -- --lr 1", "t.py -- --lr 1"),
        ("p -m torch.distributed.run --module -- pkg.t -- -x", "-m pkg.t -- -x"),
        ("p -m torch.distributed.run --no-python -- ./r.sh -- a", "./r.sh -- a"),
        ("sh -c 'sleep 60'", "sh -c 'sleep 60'"),  # exec: the command itself
    ],
)
def test_ps_shows_the_users_command_without_torchrun_and_its_options(argv: str, shown: str) -> None:
    """``ps``'s column was the whole argv cut at 80 characters: the script never showed."""
    assert shlex.join(user_command(shlex.split(argv))) == shown
    row = jobs_text([RemoteJob("j", "node0", 0, 0.0, tuple(shlex.split(argv)), 10)])
    assert row.splitlines()[1].endswith("  " + shown)
