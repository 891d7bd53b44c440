"""The job's variables reach its program with no value on any process's command line.

A hostile tester, as another user, read ``/proc/PID/cmdline`` of the hosts' short-lived
``env NAME=VALUE ...`` and caught secrets. Here every ``execve`` of the exact command
(through :func:`~clusterlaunch.core.commands.for_login_shell`, each login shell that is
installed) is traced with strace, and each login shell must still hand over hostile
names and values exactly (core/envhandoff.py). Local shells, no SSH; the same over real
sshd in tests/cluster/test_env_secrets.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.core import commands, envhandoff, envpolicy
from clusterlaunch.core.setupguard import SetupGuard
from tests.unit.test_commands import HOSTILE

LOGIN_SHELLS = ["sh", "bash", "zsh", "ksh", "tcsh", "fish"]
POSIX_SHELLS = ["sh", "bash", "zsh", "ksh"]
SECRET = "s3cr3t-Zq9"  # each value holds it; strace shows printable ASCII as it is

# Prints the program's argv, its variables (ours, and any __cl_ name left over) and uid.
DUMP = (
    "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'uid': os.getuid(), "
    "'env': {k: v for k, v in os.environ.items() if k.startswith(('HK', '__cl')) "
    "or k in sys.argv[1].split()}}))"
)


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (scripts/test-programs.sh installs it)")
    return path


def _run(argv: list[str], command: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    line, sent = commands.for_login_shell(command)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), "LC_ALL": "C.UTF-8"}
    return subprocess.run(
        [*argv, line], input=sent, cwd=cwd, env=env, capture_output=True, timeout=60, check=False
    )


def _seen(result: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    seen: dict[str, object] = json.loads(result.stdout.decode().splitlines()[-1])
    return seen


def _hostile_env(*extra: str) -> dict[str, str]:
    env = {f"HK{i}": value for i, value in enumerate(HOSTILE)}
    # A name that is another's held name (__cl_HKX), and names a login shell or rc file
    # gives a meaning: zsh refused COLUMNS=80x, status and path; for root, zsh's
    # USERNAME=nobody made the shell that user; TMOUT is read-only where an rc says so.
    env |= {"HKX": "x", "__cl_HKX": "held", "COLUMNS": "80x", "LINES": "a[$(touch pwned)]"}
    env |= {"status": "1", "path": "p", "USERNAME": "nobody", "TMOUT": "t", "IFS": "x"}
    return env | {name: f"{SECRET} {name}" for name in extra}


@pytest.mark.parametrize("shell", LOGIN_SHELLS)
def test_no_value_is_on_the_command_line_of_any_exec(shell: str, tmp_path: Path) -> None:
    """Every execve of the command, setup's included, traced: none holds a value."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace not installed (scripts/test-programs.sh installs it)")
    env = {f"HK{i}": f"{SECRET}-{i} it's $x" for i in range(3)}
    env["HKPATH"] = SECRET
    argv = [sys.executable, "-c", DUMP, "HKPATH"]
    command = commands.shell_command(str(tmp_path), "true", env, argv, SetupGuard(30))
    trace = tmp_path / "trace"
    traced = [strace, "-f", "-qq", "-e", "trace=execve", "-e", "signal=none", "-s", "100000"]
    result = _run([*traced, "-o", str(trace), _shell(shell), "-c"], command, tmp_path)
    if b"PTRACE" in result.stderr or b"Operation not permitted" in result.stderr:
        pytest.skip(f"strace cannot trace here: {result.stderr[-200:]!r}")
    assert _seen(result)["env"] == env
    execs = [line for line in trace.read_text().splitlines() if "execve(" in line]
    assert any(sys.executable in line and "HKPATH" in line for line in execs), execs
    assert [line for line in execs if SECRET in line] == []
    assert any("/bin/sh" in line and "__cl_HK0" in line for line in execs), execs


@pytest.mark.parametrize("shell", LOGIN_SHELLS)
def test_every_login_shell_hands_over_hostile_names_and_values(shell: str, tmp_path: Path) -> None:
    env = _hostile_env()
    names = " ".join(name for name in env if not name.startswith(("HK", "__cl")))
    command = commands.shell_command(
        str(tmp_path), None, env, [sys.executable, "-c", DUMP, names, *HOSTILE]
    )
    seen = _seen(_run([_shell(shell), "-c"], command, tmp_path))
    assert seen == {"argv": [names, *HOSTILE], "uid": os.getuid(), "env": env}
    assert not list(tmp_path.rglob("pwned*"))  # no value ran as code


@pytest.mark.parametrize("shell", POSIX_SHELLS)
def test_a_variable_read_only_in_the_login_shell_still_travels(shell: str, tmp_path: Path) -> None:
    """An rc file's ``readonly TMOUT`` (CIS hardening) stops ``export TMOUT=...`` there."""
    env = {"TMOUT": "600", "HK": "v"}
    command = commands.shell_command(None, None, env, [sys.executable, "-c", DUMP, "TMOUT"])
    line, sent = commands.for_login_shell(command)
    result = subprocess.run(
        [_shell(shell), "-c", "readonly TMOUT=5; " + line],
        input=sent,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert _seen(result)["env"] == env


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_home_and_path_among_the_variables_act_as_with_env(shell: str, tmp_path: Path) -> None:
    """``~`` in the program's path is the host's own HOME (expanded before any variable
    is set, as before ``env``); a bare program name is looked up in the new PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dump").write_text(f"#!{sys.executable}\n{DUMP}\n")
    (bin_dir / "dump").chmod(0o755)
    env = {"HOME": "/nonexistent", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    for program in (commands.HostPath("~/bin/dump"), "dump"):
        command = commands.shell_command(None, None, env, [program, "HOME PATH"])
        assert _seen(_run([_shell(shell), "-c"], command, tmp_path))["env"] == env


def _bash_as_sh(tmp_path: Path) -> str:
    link = tmp_path / "as-sh" / "sh"
    link.parent.mkdir()
    link.symlink_to(_shell("bash"))
    return str(link)


def test_the_names_refused_as_the_shells_own_are_those_sh_changes(tmp_path: Path) -> None:
    """Each name envpolicy refuses as /bin/sh's own fails to arrive as set through dash
    or bash as ``sh``; names only a login shell treats specially arrive, and travel."""
    shells = [_shell("dash"), _bash_as_sh(tmp_path)]

    def arrives(shell: str, name: str, value: str) -> bool:
        script = envhandoff.renaming_script([name])
        code = "import os, sys; sys.stdout.write(os.environ.get(sys.argv[1], 'unset'))"
        result = subprocess.run(
            [shell, "-c", script, "sh", sys.executable, "-c", code, name],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), f"__cl_{name}": value},
            cwd=tmp_path,
            capture_output=True,
            timeout=30,
            check=False,
        )
        return result.stdout.decode() == value

    own = sorted(envpolicy._SHELL_OWN)
    assert own and all(envpolicy.refusal(name) for name in own)
    for name in own:
        assert not all(
            arrives(shell, name, value) for shell in shells for value in ("7", "v'a $x")
        ), name
    for name in ("COLUMNS", "status", "path", "USERNAME", "TMOUT", "HISTSIZE", "LINES"):
        assert envpolicy.refusal(name) is None
        assert all(arrives(shell, name, "a[$(touch pwned)] 80x") for shell in shells), name
    assert not list(tmp_path.rglob("pwned*"))
