"""Reading an SSH config: without an Include its lines are split only when asked for,
and the OpenSSH client's commands never import paramiko (its config reader comes alone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import paramiko
import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import paramikoconfig, sshconfig
from clusterlaunch.transport.sshinclude import flatten
from clusterlaunch.transport.sshlookup import IndexedSshConfig
from tests.unit.sshtruth import ssh_g

CONFIGS = [
    "Host a b\n    Port 2201\n    User u\nHost *\n    ConnectTimeout 7\n",
    "Host a\r\n    HostName 10.0.0.1\r\n    Port 2202\r\n",  # CRLF, as written on Windows
    "Port 2203\f\r\nHost a\f\n    User v \f\n",  # ssh strips a \f at a line's end
    "# include nothing: a comment naming the keyword\nHost a\n    User w\n",
    'Host a\n    ProxyCommand "ssh -W %h:%p j"\n    IdentityFile ~/one\n    IdentityFile ~/two\n',
    "Host a\n    Port=2204\nMatch originalhost a\n    User m\n",
]


@pytest.mark.parametrize("text", CONFIGS)
def test_a_config_reads_the_same_with_or_without_its_lines(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config"
    path.write_bytes(text.encode())
    loaded = sshconfig.read_ssh_config(str(path))
    # The lines, when asked for, are what flattening gives; the parse is theirs.
    assert loaded.lines == tuple(flatten(str(path)))
    expected = IndexedSshConfig.from_text("\n".join(line.text for line in loaded.lines))
    for name in ("a", "b", "c"):
        assert loaded.parsed.lookup(name) == expected.lookup(name)


def test_match_exec_is_found_without_an_include(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text('Host a\n    Port 1\nmatch HOST a EXEC "test -e /"\n    User x\n')
    found = sshconfig.read_ssh_config(str(path)).ssh_only
    assert str(found) == f"{path}:3: Match exec"
    path.write_text("Host matching\n    User x\n")  # the word, but no Match line
    assert sshconfig.read_ssh_config(str(path)).ssh_only is None


def test_a_config_is_parsed_once_per_content_includes_too(tmp_path: Path) -> None:
    # A launch reads its config several times; an edit, here in an included file, counts.
    path, part = tmp_path / "config", tmp_path / "part"
    part.write_text("Host a\n    Port 2205\n")
    path.write_text(f"Include {part}\nHost b\n    Port 2206\n")
    first, again = sshconfig.read_ssh_config(str(path)), sshconfig.read_ssh_config(str(path))
    assert again.parsed is first.parsed and first.parsed.lookup("a")["port"] == "2205"
    part.write_text("Host a\n    Port 2207\n")
    edited = sshconfig.read_ssh_config(str(path))
    assert edited.parsed is not first.parsed and edited.parsed.lookup("a")["port"] == "2207"


def test_an_unparsable_line_is_one_usage_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("Host a\n    Port\n")
    with pytest.raises(UsageError, match=f"{path}: cannot parse the SSH config"):
        sshconfig.read_ssh_config(str(path))


def test_the_config_reader_is_paramikos_code_in_a_package_of_its_own() -> None:
    assert paramikoconfig.SSHConfig is not paramiko.SSHConfig
    assert paramikoconfig.SSHConfig.__module__ == f"{paramikoconfig.PACKAGE}.config"
    assert issubclass(IndexedSshConfig, paramikoconfig.SSHConfig)
    assert (
        paramikoconfig.SSHConfig.SETTINGS_REGEX.pattern == paramiko.SSHConfig.SETTINGS_REGEX.pattern
    )


def test_the_openssh_client_path_never_imports_paramiko(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text("Host a\n    HostName 10.0.0.9\n    ProxyJump j\nHost j\n    Port 2\n")
    program = f"""
import sys
from clusterlaunch.cli import main
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshmaster
target, = sshconfig.resolve_targets({str(path)!r}, [HostSpec(host="a", gpus=1)])
jump = sshconfig.jump_host(sshconfig.read_ssh_config({str(path)!r}), "j")
print(target.hostname, target.proxy_jump, jump.port, "paramiko" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10.0.0.9", "j", "2", "False"]


def test_exec_imports_neither_the_preflight_nor_logging() -> None:
    # exec runs no preflight, and with the OpenSSH client no paramiko: importing the
    # preflight's modules and logging cost each exec's start 7.2 ms of CPU (paired, 80 runs);
    # sshfailure is needed only when a connection fails.
    program = """
import sys
from clusterlaunch.cli import main
from clusterlaunch.controller import launcher, restarts
from clusterlaunch.transport import sshmaster
print(*sorted(m for m in ("logging", "clusterlaunch.controller.held",
    "clusterlaunch.controller.preflight", "clusterlaunch.core.reports",
    "clusterlaunch.transport.sshfailure") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_paramiko_logs_nothing_of_its_own() -> None:
    # paramiko logs a failed connection with a traceback; clusterlaunch reports it in one line.
    program = """
import logging
from clusterlaunch.transport import sshconnect
print(any(isinstance(h, logging.NullHandler) for h in logging.getLogger("paramiko").handlers))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.stdout.split() == ["True"], done.stderr


def test_a_jump_host_of_a_match_exec_config_is_resolved_by_ssh(tmp_path: Path) -> None:
    """As the targets are (ssh -G): paramiko cannot run the command, and its lookup was a
    traceback for the OpenSSH client's jump hosts (ModuleNotFoundError: invoke)."""
    path = tmp_path / "config"
    path.write_text('Host j\n    HostName 10.0.0.9\n    Port 2222\nMatch exec "true"\n    User x\n')
    jump = sshconfig.jump_host(sshconfig.read_ssh_config(str(path)), "u@j:2200")
    assert (jump.hostname, jump.port, jump.user) == ("10.0.0.9", 2200, "u")
    assert sshconfig.jump_host(sshconfig.read_ssh_config(str(path)), "j").user == "x"


@pytest.mark.parametrize(
    "criteria", ["localnetwork 10.0.0.0/8", "tagged x", "final exec true", "version OpenSSH_9*"]
)
def test_a_match_only_ssh_evaluates_is_resolved_by_ssh(tmp_path: Path, criteria: str) -> None:
    """paramiko's matcher took criteria it does not know as matching every host (Port 2
    for n0 here); ``ssh -G`` decides, and its refusal (OpenSSH 9.2: "Bad Match
    condition") is one line naming the config's line."""
    path = tmp_path / "config"
    path.write_text(f"Match {criteria}\n    Port 2\nHost n0\n    HostName 10.0.0.1\n")
    spec = HostSpec(host="n0", gpus=1)
    by_ssh = subprocess.run(["ssh", "-G", "-F", str(path), "n0"], capture_output=True, text=True)
    if by_ssh.returncode != 0:
        said = next(line for line in by_ssh.stderr.splitlines() if " line 1: " in line)
        with pytest.raises(UsageError) as refused:
            sshconfig.resolve_targets(str(path), [spec])
        assert str(refused.value).startswith(f"{path}:1: Match ") and said in str(refused.value)
    else:
        port = int(dict(line.split(" ", 1) for line in by_ssh.stdout.splitlines())["port"])
        assert sshconfig.resolve_targets(str(path), [spec])[0].port == port


# What str.splitlines() ends a line at and ssh (getline) does not: part of a word to ssh.
NOT_NEWLINES = ["\f", "\v", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", NOT_NEWLINES, ids=[f"U+{ord(c):04X}" for c in NOT_NEWLINES])
@pytest.mark.parametrize("include", [False, True], ids=["plain", "included"])
def test_a_line_break_ssh_does_not_see_is_refused_as_ssh_refuses_it(
    tmp_path: Path, char: str, include: bool
) -> None:
    body = f"Host n0\n    User alice{char}Port 2222\n"
    path = tmp_path / ("part" if include else "config")
    path.write_bytes(body.encode())
    if include:
        (tmp_path / "config").write_text(f"Include {path}\n")
    said = ssh_g(tmp_path / "config")
    assert said.returncode != 0 and "line 2" in said.stderr  # ssh: one line, bad
    with pytest.raises(UsageError) as info:
        sshconfig.resolve_targets(str(tmp_path / "config"), [HostSpec("n0", 1)])
    assert str(info.value) == (
        f"{path}:2: contains {char!r}, which ssh reads as part of a word, "
        "not as the end of a line; remove it or end the line there"
    )


@pytest.mark.parametrize("end", ["\f", "\r", " \f\r"])
def test_what_ssh_strips_from_a_lines_end_is_read_as_ssh_reads_it(tmp_path: Path, end: str) -> None:
    path = tmp_path / "config"
    path.write_bytes(f"Host n0{end}\n    Port 2222{end}\n    User alice{end}\n".encode())
    said = ssh_g(path)
    assert said.returncode == 0 and "port 2222\n" in said.stdout and "user alice\n" in said.stdout
    target = sshconfig.resolve_targets(str(path), [HostSpec("n0", 1)])[0]
    assert (target.port, target.user) == (2222, "alice")
