"""The pieces behind the hostile-input table: limits, name rules, YAML bounds, the console."""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from clusterlaunch.cli import args as cliargs
from clusterlaunch.cli import main as cli
from clusterlaunch.controller.console import Console, GuardedStream, as_bytes
from clusterlaunch.core import limits
from clusterlaunch.core.errors import StopJob, UsageError
from clusterlaunch.core.exits import ExitStatus
from clusterlaunch.core.hostnames import host_name_problem, user_name_problem
from clusterlaunch.core.hostranges import HostRangeError, count_hosts, expand_hosts
from clusterlaunch.core.rankfilter import parse_rank_filter
from clusterlaunch.core.torchrunargs import owned_torchrun_option
from clusterlaunch.core.yamlines import PythonEvents, YamlLimitError, load_yaml, loader_class


@pytest.mark.parametrize(("text", "value"), [("0", 0.0), ("2.5", 2.5), (".5", 0.5), ("3600", 3600)])
def test_numbers_in_range_are_taken(text: str, value: float) -> None:
    assert limits.GRACE(text) == value


@pytest.mark.parametrize("text", ["nan", "inf", "1e3", "-1", "1_0", " 1", "\u0661", "3600.5", ""])
def test_numbers_out_of_range_or_odd_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--grace .*: use a number of seconds from 0 to 3,600$"):
        limits.GRACE(text)


def test_whole_numbers_are_ints() -> None:
    assert limits.FANOUT("64") == 64 and isinstance(limits.FANOUT("64"), int)
    with pytest.raises(UsageError, match="from 1 to 4,096"):
        limits.FANOUT("1.0")


@pytest.mark.parametrize(
    "name",
    [
        "gpu01",
        "gpu-a.example.com",
        "10.0.0.1",
        "fe80::1",
        "fe80::1%eth0",
        "caf\u00e9",
        "a_b",
        "x+y",
    ],
)
def test_host_names_openssh_takes(name: str) -> None:
    assert host_name_problem(name) is None


@pytest.mark.parametrize(
    "name", [*"'`\"$\\;&<>|(){},", " ", "\t", "\n", "\x7f", "\x00", "\u2028", "%", "-x"]
)
def test_host_names_openssh_refuses(name: str) -> None:
    problem = host_name_problem(name if name.startswith("-") else f"a{name}b")
    assert problem is not None


@pytest.mark.parametrize("user", ["alice", "DOMAIN\\bob", "a b", "ma$chine", "a.b-c"])
def test_user_names_openssh_takes(user: str) -> None:
    assert user_name_problem(user) is None


@pytest.mark.parametrize("user", ["-l", "a;b", "a`b", "a(b", "a -b", "a\\", "a\tb", "a|b"])
def test_user_names_openssh_refuses(user: str) -> None:
    assert user_name_problem(user) is not None


@pytest.mark.parametrize(
    "word",
    [
        *("--max-restarts", "--monitor-interval=1", "-m", "--module", "--no-python"),
        *("--no_python", "--role", "--local-addr", "--start-method", "-5", "train.py"),
    ],
)
def test_torchrun_options_clusterlaunch_leaves_alone(word: str) -> None:
    assert owned_torchrun_option(word) is None


def test_rank_filter_merges_before_building() -> None:
    assert parse_rank_filter("0-3,2-5,5", 8) == frozenset(range(6))
    assert len(parse_rank_filter(",".join(["0-65535"] * 50))) == 65_536  # 50 overlaps, one set


def test_ranges_are_counted_from_the_text() -> None:
    assert count_hosts("rack[1-2]-n[01-08],head") == 17
    assert count_hosts("gpu[1-10/3]") == 4
    assert expand_hosts("gpu[01-03]", limit=3) == ["gpu01", "gpu02", "gpu03"]
    with pytest.raises(HostRangeError, match="only 2 more fit"):
        expand_hosts("gpu[01-03]", limit=2)
    with pytest.raises(HostRangeError, match="at most 4,096"):
        expand_hosts("plain", limit=0)


@pytest.mark.parametrize("events", [None, PythonEvents], ids=["libyaml-or-default", "python"])
def test_yaml_limits_hold_with_either_parser(events: type | None) -> None:
    def load(text: str) -> object:
        return load_yaml(text) if events is None else yaml.load(text, Loader=loader_class(events))

    assert load("hosts:\n  - {host: a, gpus: 1}\n") == {"hosts": [{"host": "a", "gpus": 1}]}
    with pytest.raises(YamlLimitError, match="nested deeper than 32"):
        load("x: " + "[" * 40 + "]" * 40)
    with pytest.raises(YamlLimitError, match="inside its own anchor"):
        load("x: &a [*a]")
    bomb = "a: &a [1,1,1,1,1,1,1,1]\n" + "".join(
        f"{n}: &{n} [" + ",".join([f"*{p}"] * 8) + "]\n"
        for p, n in zip("abcdef", "bcdefg", strict=True)
    )
    with pytest.raises(YamlLimitError, match="more than 65,536 YAML values") as caught:
        load(bomb)
    assert caught.value.line == 6  # f: &f holds 8**6 values, the first level over the limit


class _ClosedPipe(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


def test_a_closed_pipe_stops_once_then_is_silent() -> None:
    stream = GuardedStream(_ClosedPipe(), "stdout")
    with pytest.raises(StopJob) as caught:
        stream.write(b"x")
    assert caught.value.exit_code == ExitStatus.BROKEN_PIPE == 141
    assert stream.write(b"more") == 4  # teardown may go on writing: nothing raised
    quiet = GuardedStream(_ClosedPipe(), "stderr")
    assert quiet.write(b"x", stop=False) == 1 and quiet.broken


def test_messages_carry_the_bytes_the_user_typed() -> None:
    assert as_bytes("caf\udce9.yaml") == b"caf\xe9.yaml"
    assert as_bytes("lone \ud800") == b"lone \\ud800"
    err = io.BytesIO()
    Console(out=io.BytesIO(), err=err).say("clusterlaunch: error: \udcff")
    assert err.getvalue() == b"clusterlaunch: error: \xff\n"


def test_a_local_oserror_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    def fail(args: object) -> None:
        raise PermissionError(13, "Permission denied", "/var/log/x")

    monkeypatch.setattr(cliargs, "job_request", fail)
    assert cli.main(["run", "--dry-run", "hosts.yaml", "train.py"]) == 1
    assert capsysbinary.readouterr().err == b"clusterlaunch: error: /var/log/x: Permission denied\n"


def test_options_given_twice_in_any_spelling_are_refused() -> None:
    with pytest.raises(UsageError, match="--grace is given twice"):
        cli.build_parser().parse_args(["run", "--grace=1", "--grace", "2", "h", "s"])
    args = cli.build_parser().parse_args(["run", "--env", "A=1", "--env", "B=2", "h", "s"])
    assert args.env == ["A=1", "B=2"]  # the repeatable ones stay repeatable


def test_a_non_utf8_working_directory_needs_workdir(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Not under tmp_path: the message shortens a long path, and pytest's (longer
    # under xdist) would cut the name this test looks for.
    short = Path(tempfile.mkdtemp(prefix="u", dir="/tmp"))
    try:
        here = short / "caf\udce9"  # a directory whose name is Latin-1 bytes
        here.mkdir()
        (here / "hosts.yaml").write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
        monkeypatch.chdir(here)
        assert cli.main(["run", "--dry-run", "hosts.yaml", "train.py"]) == 2
        err = capsysbinary.readouterr().err
        assert err.startswith(b"clusterlaunch: error: this directory's path (the default workdir")
        assert b"caf\\xe9': not valid UTF-8" in err and err.count(b"\n") == 1
        assert cli.main(["run", "--dry-run", "--workdir", "/tmp", "hosts.yaml", "train.py"]) == 0
    finally:
        monkeypatch.undo()
        shutil.rmtree(short)
