"""``--env-file FILE`` and ``env_file:``: KEY=VALUE lines, ``#`` comments, errors at file:line."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.envfile import parse_env_text, read_env_file
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostfile import load_inventory


def test_the_docker_systemd_convention() -> None:
    text = (
        "\ufeff# comment\n"
        "\n"
        "NCCL_DEBUG=INFO\n"
        "   # indented comment\n"
        "export WANDB_PROJECT=demo\n"
        "EMPTY=\n"
        "SPACES=a b  c\n"
        'QUOTED="x y"\n'
        "SINGLE='$HOME'\n"
        'HALF="x\n'
        "HASH=a#b\n"
        "EQUALS=a=b\r\n"
        "TRAILING=a b \t\n"
        'PAD="a  "\n'
    )
    assert parse_env_text(text, "v.env") == {
        "NCCL_DEBUG": "INFO",
        "WANDB_PROJECT": "demo",
        "EMPTY": "",
        "SPACES": "a b  c",
        "QUOTED": "x y",
        "SINGLE": "$HOME",
        "HALF": '"x',
        "TRAILING": "a b",
        "PAD": "a  ",
        "HASH": "a#b",
        "EQUALS": "a=b",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A=1\nB=2\nFOO\n", "v.env:3: expected KEY=VALUE, got a line without '='"),
        ("A=1\n1X=2\n", "v.env:2: 1X: '1X' is not a valid variable name"),
        ("A=1\nA=2\n", "v.env:2: A: is set twice (also at line 1); keep one"),
        ("CUDA_VISIBLE_DEVICES=0\n", "v.env:1: CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is set"),
        ("ASCEND_RT_VISIBLE_DEVICES=0\n", "v.env:1: ASCEND_RT_VISIBLE_DEVICES: ASCEND_RT_VISIBLE"),
        ("RANK=0\n", "v.env:1: RANK: RANK is set by torchrun"),
        ("A=1\n =2\n", "v.env:2: expected KEY=VALUE, got no name before '='"),
    ],
)
def test_errors_name_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(HostsFileError) as info:
        parse_env_text(text, "v.env")
    assert str(info.value).startswith(message), str(info.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(HostsFileError, match="no such env file"):
        read_env_file(str(tmp_path / "missing.env"))
    (tmp_path / "latin1.env").write_bytes(b"A=1\nB=caf\xe9\n")
    with pytest.raises(HostsFileError, match=":2: not UTF-8"):
        read_env_file(str(tmp_path / "latin1.env"))
    (tmp_path / "big.env").write_text("A=" + "x" * (1 << 20) + "\n")
    with pytest.raises(HostsFileError, match="larger than 1 MiB"):
        read_env_file(str(tmp_path / "big.env"))


def test_hosts_file_env_file_layers(tmp_path: Path) -> None:
    (tmp_path / "common.env").write_text("A=common\nB=common\nC=common\n")
    (tmp_path / "gpu1.env").write_text("B=host-file\nC=host-file\n")
    (tmp_path / "h.yaml").write_text(
        "defaults:\n"
        "  gpus: 1\n"
        "  env_file: common.env\n"  # relative to the hosts file's directory
        "  env: {A: defaults-env}\n"
        "hosts:\n"
        "  - host: gpu1\n"
        f"    env_file: {tmp_path / 'gpu1.env'}\n"
        "    env: {C: host-env}\n"
        "  - host: gpu2\n"
    )
    hosts = load_inventory(str(tmp_path / "h.yaml")).hosts
    # defaults' file < defaults' env < the host's file < the host's env
    assert dict(hosts[0].env) == {"A": "defaults-env", "B": "host-file", "C": "host-env"}
    assert dict(hosts[1].env) == {"A": "defaults-env", "B": "common", "C": "common"}


def test_hosts_file_env_file_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.env").write_text("OK=1\nNOT AN ASSIGNMENT\n")
    (tmp_path / "h.yaml").write_text("hosts:\n  - {host: a, gpus: 1, env_file: bad.env}\n")
    with pytest.raises(HostsFileError) as info:
        load_inventory(str(tmp_path / "h.yaml"))
    assert str(info.value) == (
        f"{tmp_path / 'bad.env'}:2: expected KEY=VALUE, got a line without '='"
    )
    (tmp_path / "h.yaml").write_text("hosts:\n  - {host: a, gpus: 1, env_file: 3}\n")
    with pytest.raises(HostsFileError, match=r"hosts\[0\]\.env_file: must be a non-empty string"):
        load_inventory(str(tmp_path / "h.yaml"))


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h.yaml").write_text("hosts:\n  - {host: localhost, gpus: 1}\n")
    return tmp_path


def plan_env(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[dict, list[str]]:
    assert main(["run", "--dry-run", "--json", *flags, "h.yaml", "t.py"]) == 0
    node = json.loads(capsys.readouterr().out)["nodes"][0]
    return node["env"], shlex.split(node["command"])


def test_env_file_values_travel_quoted_like_env(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "$(touch pwned) 'q' \"d\" `id` ; x"
    (work / "a.env").write_text(f"A=from-a\nB=from-a\nH={hostile}\n")
    (work / "b.env").write_text("B=from-b\nC=from-b\n")
    env, words = plan_env(
        capsys, "--env-file", "a.env", "--env-file", "b.env", "--env", "C=from-env"
    )
    assert (env["A"], env["B"], env["C"], env["H"]) == ("from-a", "from-b", "from-env", hostile)
    assert f"__cl_H={hostile}" in words  # one word, exactly: the host's shell expands nothing


def test_env_file_errors_in_the_cli(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "a.env").write_text("A=1\nexport\n")
    assert main(["run", "--dry-run", "--env-file", "a.env", "h.yaml", "t.py"]) == 2
    assert capsys.readouterr().err == (
        "clusterlaunch: error: a.env:2: expected KEY=VALUE, got a line without '='\n"
    )
    assert main(["run", "--dry-run", "--env-file", "nope.env", "h.yaml", "t.py"]) == 2
    assert capsys.readouterr().err == "clusterlaunch: error: nope.env: no such env file\n"


FIX = "give the path of a KEY=VALUE file, absolute or relative to the hosts file's folder"


@pytest.mark.parametrize(
    ("hosts", "where", "named", "why"),
    [
        (
            "defaults:\n  gpus: 1\nhosts:\n  - host: a\n  - host: b\n    env_file: nope.env\n",
            "6: hosts[1].env_file",
            "nope.env",
            "no such file",
        ),
        (
            "defaults:\n  env_file: d.env\nhosts:\n  - {host: a, gpus: 1}\n",
            "2: defaults.env_file",
            "d.env",
            "Is a directory",
        ),
    ],
    ids=["missing", "a-folder-in-defaults"],
)
def test_an_env_file_that_cannot_be_read_is_the_hosts_file_lines_mistake(
    tmp_path: Path, hosts: str, where: str, named: str, why: str
) -> None:
    (tmp_path / "d.env").mkdir()
    (tmp_path / "h.yaml").write_text(hosts)
    with pytest.raises(HostsFileError) as info:
        load_inventory(str(tmp_path / "h.yaml"))
    assert str(info.value) == (
        f"{tmp_path / 'h.yaml'}:{where}: cannot read {tmp_path / named}: {why}; {FIX}"
    )


def test_a_missing_env_file_in_the_cli_is_one_line_and_exit_2(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "h.yaml").write_text("hosts:\n  - {host: localhost, gpus: 1, env_file: /no/x.env}\n")
    assert main(["run", "--dry-run", "h.yaml", "t.py"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == (
        "",
        f"clusterlaunch: error: h.yaml:2: hosts[0].env_file: cannot read /no/x.env: no such file; "
        f"{FIX}\n",
    )


# Characters str.splitlines() ends a line at, though neither a shell nor docker does.
NOT_NEWLINES = ["\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", NOT_NEWLINES, ids=[f"U+{ord(c):04X}" for c in NOT_NEWLINES])
def test_only_newline_ends_a_line_as_in_a_shell(tmp_path: Path, char: str) -> None:
    text = f"A=x{char}B=y\nC=z\n"
    assert parse_env_text(text, "v.env") == {"A": f"x{char}B=y", "C": "z"}
    (tmp_path / "v.env").write_text(text)
    script = '. ./v.env && printf %s "$A"'  # what sh makes of the same file
    done = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    assert done.stdout.decode() == f"x{char}B=y"


@pytest.mark.parametrize("char", NOT_NEWLINES, ids=[f"U+{ord(c):04X}" for c in NOT_NEWLINES])
def test_a_line_starting_with_one_is_refused_at_its_line(char: str) -> None:
    with pytest.raises(HostsFileError) as info:
        parse_env_text(f"OK=1\n{char}A=1\n", "v.env")
    assert str(info.value).startswith(f"v.env:2: {char}A: {char + 'A'!r} is not a valid variable")


def test_line_numbers_count_newlines_only() -> None:
    with pytest.raises(HostsFileError) as info:
        parse_env_text("A=1\u2028B\fC\r\nD=2\r\nNOPE\n", "v.env")
    assert str(info.value) == "v.env:3: expected KEY=VALUE, got a line without '='"


def test_a_crlf_file_reads_like_an_lf_one() -> None:
    assert parse_env_text("A=1\r\nB=2 \r\n\r\n", "v.env") == {"A": "1", "B": "2"}
