"""for_login_shell: one line every login shell runs alike, the command first on stdin.

Real shells, as sshd runs a session's command (``SHELL -c LINE``): the POSIX ones
run the command themselves, tcsh and fish hand it to /bin/sh. The rest of stdin
(the agent's program) must reach the command untouched.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from clusterlaunch.core.commands import for_login_shell

SHELLS = [sh for sh in ("/bin/sh", "bash", "zsh", "tcsh", "fish") if shutil.which(sh)]
HOSTILE = (
    "printf '%s\\n' \"$0\" >&2; x='it'\"'\"'s \\\\ back! $HOME `id` $(id)\n"
    "two lines'; printf '%s\\n' \"$x\"; cat; exit 7"
)


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    "command",
    [HOSTILE, HOSTILE.replace("two", "twö ✓"), HOSTILE + "\n" + ": " + "y" * 100_000],
    ids=["ascii", "utf-8", "100kB"],
)
def test_every_shell_runs_the_command_and_passes_the_rest_of_stdin(
    shell: str, command: str
) -> None:
    line, sent = for_login_shell(command, b"REST\x00OF STDIN")
    assert "\n" not in line.split("\n", 1)[1] and "\\" not in line and "!" not in line
    done = subprocess.run([shell, "-c", line], input=sent, capture_output=True, timeout=30)
    two = "twö ✓" if "twö" in command else "two"
    expected = f"it's \\\\ back! $HOME `id` $(id)\n{two} lines\n".encode() + b"REST\x00OF STDIN"
    assert (done.returncode, done.stdout) == (7, expected), done.stderr
    posix = shell not in ("tcsh", "fish")  # they give it to /bin/sh
    assert done.stderr.decode().strip().endswith(shell if posix else "/bin/sh")


def test_bash_reads_an_ascii_command_with_a_builtin_and_any_other_with_head() -> None:
    """read -N counts characters: only where they are bytes (1.3 ms of head spared)."""
    assert "read -r -N 15 __cl_c" in for_login_shell("echo hi")[0]  # 7 + its end mark
    assert "read -r -N" not in for_login_shell("echo hé")[0]


@pytest.mark.parametrize("shell", SHELLS)
def test_stdin_ending_inside_the_command_runs_nothing_of_it(shell: str) -> None:
    line, sent = for_login_shell("echo ran; exit 0")
    done = subprocess.run([shell, "-c", line], input=sent[:-3], capture_output=True, timeout=30)
    assert b"ran" not in done.stdout


@pytest.mark.parametrize("shell", SHELLS)
def test_a_command_whose_start_a_login_file_read_runs_nothing_and_says_why(shell: str) -> None:
    """A .bashrc doing `read` ate the first line: bash's read -N then ran the rest of the
    command, outside the setup guard, and the payload's first bytes as shell code."""
    line, sent = for_login_shell("echo first\necho second; exit 0", b"PAYLOAD BYTES")
    done = subprocess.run([shell, "-c", line], input=sent[11:], capture_output=True, timeout=30)
    assert done.stdout == b"" and done.returncode == 1, done
    assert b"clusterlaunch: the command sent on stdin arrived cut short" in done.stderr
