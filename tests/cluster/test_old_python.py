"""A host Python older than clusterlaunch's minimum: one line naming it, for every command.

Its bootstrap printed a SyntaxError (check, ps, doctor) or a traceback (exec);
CentOS 7's python3 is 3.6. The pyenv builds in /root stand in for such a host.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.support import run_cli, write_hosts

pytestmark = [pytest.mark.cluster]

OLD = Path("/root/.pyenv/versions/3.6.15/bin/python")
SAID = f"{OLD} is Python 3.6; clusterlaunch needs Python 3.8 or newer on the hosts"
FIX = "(set python: in the hosts file, or --python)"
# command: its arguments after the hosts file
COMMANDS = {
    "check": ["sleeper.py"],
    "run": ["sleeper.py"],
    "ps": [],
    "kill": ["no-such-job"],
    "stacks": ["no-such-job"],
    "doctor": [],
}


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    if not OLD.exists():
        pytest.skip(f"no {OLD} here")
    return write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"python": str(OLD)}), ("node1", 1)])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_python_too_old_is_one_line_and_exit_2(sim_cluster, hosts: Path, command: str) -> None:
    result = run_cli(command, sim_cluster, str(hosts), *COMMANDS[command], timeout=90)
    assert result.returncode == 2, result.stdout + result.stderr
    shown = result.stdout + result.stderr
    [line] = [line for line in shown.splitlines() if "node0" in line]
    assert line.endswith(f"{SAID} {FIX}"), line
    assert "SyntaxError" not in shown and "Traceback" not in shown
    if command == "run":
        assert "nothing was started" in result.stderr


def test_exec_starts_nothing_on_a_host_whose_python_is_too_old(sim_cluster, hosts: Path) -> None:
    result = run_cli("exec", sim_cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == 2, result.stderr
    assert "[node1] ran" in result.stdout and "[node0]" not in result.stdout
    assert f"[node0] clusterlaunch: {SAID} {FIX}" in result.stderr
    assert "1 of 2 host(s) failed: node0 (2)" in result.stderr
    assert "Traceback" not in result.stderr and "without a report" not in result.stderr


def test_troubleshooting_shows_what_doctor_and_ps_print(sim_cluster, hosts: Path) -> None:
    """docs/troubleshooting.md said doctor printed ps's error line; it prints its table."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md").read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```text\n")[1:]]
    [quoted] = [block for block in blocks if "node0  doctor" in block]
    doctor = run_cli("doctor", sim_cluster, str(hosts), timeout=90)
    shown = (doctor.stdout + doctor.stderr).replace(str(OLD), "/usr/bin/python3")
    assert doctor.returncode == 2 and set(quoted.splitlines()) <= set(shown.splitlines()), shown
    ps = run_cli("ps", sim_cluster, str(hosts), timeout=90)
    error = "clusterlaunch: error: node0: /usr/bin/python3 is Python 3.6; "
    assert ps.stderr.replace(str(OLD), "/usr/bin/python3").startswith(error)
    assert error.rstrip() in " ".join(text.split())  # (the doc wraps it)


BROKEN = {"setup": "export PYTHONHOME=/nonexistent"}  # no standard library there
BROKEN_SAID = "failed to start (exit 1): Fatal Python error: init_fs_encoding: "
# command: its arguments after the hosts file, its status (doctor's: it found an error)
BROKEN_COMMANDS = {"check": ([], 2), "exec": (["--", "true"], 2), "ps": ([], 2), "doctor": ([], 1)}


@pytest.mark.parametrize("command", list(BROKEN_COMMANDS))
def test_a_python_the_setup_broke_is_named_with_its_own_error(
    sim_cluster, tmp_path: Path, command: str
) -> None:
    """It was "is not a Python; set python: ...", which hid Python's fatal error and
    blamed python:, not the environment the setup gave it."""
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, BROKEN), ("node1", 1)])
    words, status = BROKEN_COMMANDS[command]
    result = run_cli(command, sim_cluster, str(hosts), *words, timeout=90)
    shown = result.stdout + result.stderr
    assert result.returncode == status, shown
    [line] = [line for line in shown.splitlines() if BROKEN_SAID in line]
    assert "node0" in line and "(from setup: or the host's login files): unset or correct" in line
    # exec keeps a host's last 20 lines, past its path configuration's PYTHONHOME line
    named = "PYTHONHOME or PYTHONPATH" if command == "exec" else "PYTHONHOME=/nonexistent"
    assert named in line, line
    assert "is not a Python" not in shown
