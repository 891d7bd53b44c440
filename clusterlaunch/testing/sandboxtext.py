"""What ``clusterlaunch sandbox up|down`` print: the hosts, commands to try, what was stopped."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from clusterlaunch.core.defaults import SANDBOX_DIR as DEFAULT_DIR
from clusterlaunch.testing import sandboxslurm

if TYPE_CHECKING:
    from clusterlaunch.testing.sandbox import Sandbox, Stopped

EXAMPLE = Path("examples") / "hello_ranks.py"
EXEC_DEMO = 'echo "$CLUSTERLAUNCH_SIM_HOST: job $CLUSTERLAUNCH_JOB_ID in $PWD"'


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when it lies below it (shorter to type), else absolute."""
    absolute = path.absolute()
    try:
        return str(absolute.relative_to(cwd))
    except ValueError:
        return str(absolute)


def example_script(cwd: Path) -> Path | None:
    """``examples/hello_ranks.py`` here, else in the source checkout clusterlaunch runs from."""
    for base in (cwd, Path(__file__).resolve().parents[2]):
        if (base / EXAMPLE).is_file():
            return base / EXAMPLE
    return None


def up_text(sandbox: Sandbox, cwd: Path) -> str:
    """What ``up`` prints: the hosts, then the exact commands to try."""
    where, config = _shown(sandbox.directory, cwd), _shown(sandbox.ssh_config, cwd)
    connection = ["--ssh-config", config, _shown(sandbox.hosts_file, cwd)]
    script = example_script(cwd)
    script_word = _shown(script, cwd) if script else "YOUR_SCRIPT.py"
    verb = "is already up" if sandbox.already_up else "is up"
    lines = [f"note: {note}" for note in sandbox.notes]
    lines.append(f"sandbox {verb} in {where}: {len(sandbox.hosts)} simulated host(s)")
    lines += [f"  {h['name']}  {h['addr']}:{h['port']}  sshd pid {h['pid']}" for h in sandbox.hosts]
    lines += ["(nothing new was started)"] if sandbox.already_up else []
    lines += ["", "Try:"]
    lines.append(_command("clusterlaunch", "run", *connection, script_word))
    if script is None:
        lines.append("  (no examples/hello_ranks.py here or in clusterlaunch's source checkout)")
    lines.append(_command("clusterlaunch", "exec", *connection, "--", "sh", "-c", EXEC_DEMO))
    lines.append(_command("ssh", "-F", config, sandbox.hosts[0]["name"]))
    if sandboxslurm.is_up(sandbox.directory):
        lines += sandboxslurm.try_lines(sandbox.directory, where, script_word)
    elsewhere = sandbox.directory.absolute() != (cwd / DEFAULT_DIR).absolute()
    down = ["--dir", where] if elsewhere else []
    lines += ["When done:", _command("clusterlaunch", "sandbox", "down", *down)]
    return "\n".join(lines) + "\n"


def _pids(pids: list[int]) -> str:
    return ", ".join(map(str, pids))


def _command(*argv: str) -> str:
    """One printed command line, quoted so that it can be pasted into a shell."""
    return "  " + shlex.join(argv)


def down_text(stopped: Stopped | None, directory: Path, cwd: Path) -> str:
    """What ``down`` prints."""
    where = _shown(directory, cwd)
    if stopped is None:
        return f"no sandbox in {where}: nothing to stop\n"
    lines = [f"stopped {len(stopped.sshd_pids)} sshd (pid {_pids(stopped.sshd_pids)})"]
    if stopped.slurm_pids:
        lines.append(f"stopped munged, slurmctld and slurmd (pid {_pids(stopped.slurm_pids)})")
    count = len(stopped.leftovers)
    lines.append(
        f"killed {count} leftover process(es) started through the hosts:"
        if count
        else "no process started through the sandbox hosts was left running"
    )
    lines += [f"  {proc}" for proc in stopped.leftovers]
    lines.append(f"removed {where}")
    return "\n".join(lines) + "\n"
