"""No variable's value is ever on a command line on the hosts, where any user reads it.

The hostile tester ran a spy as user nobody that read ``/proc/PID/cmdline`` of the
hosts' login shells in a tight loop, and caught ``env WANDB_API_KEY=... python ...``:
every value of ``env:``, ``env_file:``, ``--env``, ``--env-file`` and ``--forward-env``
was an argument of ``env``. Here, over real sshd with both clients, for ``run`` and
``exec``:

* a spy like the tester's watches every process's command line while each host's
  ``setup:`` sleeps and the programs start;
* every sshd runs under ``strace -f``, which records the argv of every ``execve`` on
  the hosts, the login shell's own included: the direct check, which a spy's sampling
  cannot be;
* the job still sees each variable, as it was set.

The controller's own command line is not the hosts': ``--env NAME=VALUE`` is in it by
the user's choice (docs/hosts-file.md says to use ``--forward-env`` or ``--env-file``).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from pathlib import Path

import pytest

from clusterlaunch.testing import LoopbackCluster, SimHost
from tests.cluster.support import PYTHON, cli_argv, run_cli, start_cli, write_hosts

pytestmark = [pytest.mark.cluster]
LOGIN_LINE = b'[ -z "$version" ]'  # commands.for_login_shell's line: a login shell's argv
BOOTSTRAP = b"import marshal,os,sys,zlib"  # core/bootstrap.py: the program the shell became


class TracedCluster(LoopbackCluster):
    """Each sshd under ``strace -D -f``: every execve of every session, into one file.

    ``-D`` keeps sshd the process the cluster started (its PidFile says so), the tracer
    a detached grandchild that ends with the last process it traces.
    """

    def _launch_prefix(self, host: SimHost) -> list[str]:
        strace = shutil.which("strace")
        assert strace is not None
        trace = ["-D", "-f", "-qq", "--seccomp-bpf", "-e", "trace=execve", "-e", "signal=none"]
        return [strace, *trace, "-s", "100000", "-o", str(self.trace(host))]

    def trace(self, host: SimHost) -> Path:
        return host.host_dir / "execve.trace"


class Spy(threading.Thread):
    """The tester's spy: every process's command line at each scan, and the login shells'
    in a tight loop between scans, through each exec, until they end."""

    def __init__(self, needles: list[str], controller: list[str]) -> None:
        super().__init__(daemon=True)
        self.needles = [needle.encode() for needle in needles]
        # The controller's own command line (its children's too, between fork and exec).
        self.controller = b"".join(word.encode() + b"\0" for word in controller)
        self.skip = {os.getpid()}
        self.hits: list[bytes] = []
        self.chains: dict[int, list[bytes]] = {}  # each login shell's command lines, in order
        self.watching: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        rounds = 0
        while not self.done.is_set():
            if rounds % 50 == 0:
                for name in os.listdir("/proc"):
                    if name.isdigit() and int(name) not in self.skip:
                        self._read(int(name))
            for pid in list(self.watching):
                if not self._read(pid) or BOOTSTRAP in self.chains[pid][-1]:
                    self.watching.discard(pid)  # gone, or our program: its argv stays
            rounds += 1
            if not self.watching:  # spin only while a login shell is on its way
                self.done.wait(0.005)

    def _read(self, pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            return False
        if cmdline != self.controller and any(needle in cmdline for needle in self.needles):
            self.hits.append(cmdline)
        if LOGIN_LINE in cmdline and pid not in self.chains:
            self.chains[pid] = []
            self.watching.add(pid)
        chain = self.chains.get(pid)
        if chain is not None and cmdline and (not chain or chain[-1] != cmdline):
            chain.append(cmdline)
        return bool(cmdline)

    def walked(self) -> int:
        """Login shells it watched become one of our programs (the bootstrap)."""
        return sum(1 for chain in self.chains.values() if BOOTSTRAP in chain[-1] and len(chain) > 1)


def _sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str], list[str]]:
    """One secret per way a variable is set, and the CLI options that set them."""
    secrets = {
        name: f"secret-{uuid.uuid4().hex}-{name.lower()}"
        for name in ("HOSTS_ENV", "HOSTS_ENV_FILE", "CLI_ENV", "CLI_ENV_FILE", "FORWARDED")
    }
    (tmp_path / "hosts.env").write_text(f"HOSTS_ENV_FILE={secrets['HOSTS_ENV_FILE']}\n")
    (tmp_path / "cli.env").write_text(f"CLI_ENV_FILE='{secrets['CLI_ENV_FILE']}'\n")
    monkeypatch.setenv("FORWARDED", secrets["FORWARDED"])
    options = ["--env-file", str(tmp_path / "cli.env"), "--forward-env", "FORWARDED"]
    return secrets, [*options, "--env", f"CLI_ENV={secrets['CLI_ENV']}"]


@pytest.mark.parametrize("client", ["paramiko", "openssh"])
def test_no_value_is_on_any_command_line_on_the_hosts(
    sim_cluster_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace not installed (scripts/test-programs.sh installs it)")
    cluster = sim_cluster_factory(2, cls=TracedCluster)
    if "sshd" not in cluster.trace(cluster.hosts[0]).read_text(errors="replace"):
        pytest.skip("strace could not trace sshd here")
    secrets, options = _sources(tmp_path, monkeypatch)
    extra = {
        "env": {"HOSTS_ENV": secrets["HOSTS_ENV"]},
        "env_file": str(tmp_path / "hosts.env"),
        "setup": "sleep 0.5",  # the spy finds the login shells meanwhile
    }
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, extra), ("node1", 1, extra)])
    names = list(secrets)
    seen: list[dict[str, str]] = []
    for command, args in (
        ("run", [str(hosts), "print_vars.py", *names]),
        ("exec", [str(hosts), "--", PYTHON, "print_vars.py", *names]),
    ):
        argv = ["--ssh-client", client, *options, *args]
        spy = Spy(list(secrets.values()), cli_argv(command, cluster, *argv))
        spy.start()
        try:
            process = start_cli(command, cluster, *argv)
            out, err = process.communicate(timeout=120)
        finally:
            spy.done.set()
            spy.join(timeout=30)
        assert process.returncode == 0, err.decode()
        seen += [
            json.loads(line.split("VARS=", 1)[1])
            for line in out.decode().splitlines()
            if "VARS=" in line
        ]
        assert spy.hits == [], spy.hits
        # It read each host's login shell until it became our program: its reads went
        # through every exec of the command.
        assert spy.walked() >= 2, spy.chains
    assert len(seen) == 4 and all(each == secrets for each in seen), seen
    for host in cluster.hosts:
        execs = cluster.trace(host).read_text(errors="replace").splitlines()
        ran = [line for line in execs if "execve(" in line and "__cl_HOSTS_ENV" in line]
        assert len(ran) >= 2, execs[-20:]  # /bin/sh: the names only (run's agent, exec's)
        assert [line for line in execs if any(s in line for s in secrets.values())] == []


def test_localhost_puts_no_value_on_a_command_line(tmp_path: Path) -> None:
    """``localhost`` runs the same command through the login shell, without SSH: every
    execve of clusterlaunch and what it starts, traced (no ``--env``: that one is on
    clusterlaunch's own command line by the user's choice)."""
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace not installed (scripts/test-programs.sh installs it)")
    secret = f"secret-{uuid.uuid4().hex}"
    (tmp_path / "vars.env").write_text(f"FROM_FILE={secret}-file\n")
    extra = {"env": {"FROM_HOSTS": f"{secret}-hosts"}, "setup": "true"}
    hosts = write_hosts(tmp_path / "hosts.yaml", [("localhost", 1, extra)])
    trace = tmp_path / "execve.trace"
    traced = [strace, "-f", "-qq", "--seccomp-bpf", "-e", "trace=execve", "-e", "signal=none"]
    result = run_cli(
        "exec",
        None,
        *("--env-file", str(tmp_path / "vars.env"), str(hosts), "--"),
        *(PYTHON, "print_vars.py", "FROM_FILE", "FROM_HOSTS"),
        prefix=[*traced, "-s", "100000", "-o", str(trace)],
    )
    assert result.returncode == 0, result.stderr
    said = json.loads(result.stdout.split("VARS=", 1)[1].splitlines()[0])
    assert said == {"FROM_FILE": f"{secret}-file", "FROM_HOSTS": f"{secret}-hosts"}
    execs = [line for line in trace.read_text(errors="replace").splitlines() if "execve(" in line]
    assert any(PYTHON in line and "print_vars.py" in line for line in execs), execs[-20:]
    assert [line for line in execs if secret in line] == []
    assert any("__cl_FROM_HOSTS" in line for line in execs), execs[-20:]
