"""The benchmark environment: a simulated cluster, hosts files, commands, cleanup.

Commands run as timed subprocesses (:mod:`benchmarks.processes`). Processes are
only ever signalled by PID; leftovers are found by the simulated hosts' markers
(:mod:`clusterlaunch.testing.orphans`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from benchmarks.processes import BenchError, Timed, run_timed
from clusterlaunch.testing import (
    LoopbackCluster,
    PortInUseError,
    find_free_port,
    find_processes,
    kill_processes,
    loopback_addrs,
    port_is_free,
    wait_until_gone,
)

REPO = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "workers"
SSH_PORT_FROM = 24000
"""sshd port search starts here: away from the test suite's 22220+."""
MASTER_PORT_FROM = 31000


class NoRcLoopbackCluster(LoopbackCluster):
    """The product's loopback cluster, whose sessions skip the login shell's ~/.bashrc.

    bash sources ~/.bashrc for commands run by sshd only as a top-level shell
    (SHLVL unset or 0); sshd's ``SetEnv SHLVL=1`` makes it a nested one. Stock
    Debian/Ubuntu .bashrc files return at once for non-interactive shells
    anyway; a heavy one (``eval "$(pyenv init -)"``: ~0.1 s of CPU per session)
    would be paid once per host and session by every tool alike, and on a
    simulated cluster all of those run on this machine's few cores.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, login_rc=False, **kwargs)  # sshd: SetEnv ... SHLVL=1

    def _write_files(self) -> None:
        super()._write_files()
        for host in self.hosts:
            config = host.host_dir / "sshd_config"
            config.write_text(_default_kex(config.read_text()))
        self.ssh_config.write_text(_default_kex(self.ssh_config.read_text()))


def _default_kex(config: str) -> str:
    """The config without its ``KexAlgorithms`` line: the servers' default key exchange.

    Real servers do not pin it; OpenSSH 9 then negotiates sntrup761x25519
    (~0.1 s of client CPU per connection, paid by pdsh and ``--ssh-client
    openssh``), paramiko, which lacks it, curve25519.
    """
    return re.sub(r"(?m)^\s*KexAlgorithms .*\n", "", config)


class Bench:
    """One benchmark run's environment (use as a context manager)."""

    def __init__(
        self,
        n_hosts: int,
        repeat: int,
        quick: bool = False,
        profile_dir: Path | None = None,
        log: IO[str] = sys.stderr,
        keep: bool = False,
        host_python: str | None = None,
        host_rc: bool = False,
        client_sizes: tuple[int, ...] = (),
    ) -> None:
        self.n_hosts = n_hosts
        self.repeat = repeat
        self.quick = quick
        self.profile_dir = profile_dir
        self.log_stream = log
        self.keep = keep
        self.python = sys.executable
        """The interpreter of the controller, and of torch jobs on the hosts."""
        self.host_python = host_python or sys.executable
        """The hosts' interpreter for ``exec`` measurements (the agent needs only the stdlib)."""
        self.host_rc = host_rc
        self.client_sizes = client_sizes
        """Host counts for ``clients`` (empty: its own defaults)."""
        """True: sessions source the login shell's ~/.bashrc (see NoRcLoopbackCluster)."""
        self.tmp = Path(tempfile.mkdtemp(prefix="clusterlaunch-bench-"))
        self.workdir = self.tmp / "work"
        self.cluster: LoopbackCluster | None = None
        self._hosts_files: dict[tuple[int, str], Path] = {}
        self._next_master_port = MASTER_PORT_FROM
        self.env = self._make_env()

    # -- lifecycle ------------------------------------------------------------
    def __enter__(self) -> Bench:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Copy the workers, start the cluster."""
        shutil.copytree(WORKERS, self.workdir, ignore=shutil.ignore_patterns("__pycache__"))
        addrs = loopback_addrs(self.n_hosts)
        start = SSH_PORT_FROM
        for _ in range(5):
            port = find_free_port(addrs, start)
            try:
                began = time.perf_counter()
                kind = LoopbackCluster if self.host_rc else NoRcLoopbackCluster
                self.cluster = kind(self.n_hosts, self.tmp / "cluster", port=port)
                self.cluster.start()
                self.log(
                    f"simulated cluster: {self.n_hosts} sshd on 127.0.0.11.. port {port} "
                    f"(up in {time.perf_counter() - began:.2f} s)"
                )
                break
            except PortInUseError:  # a concurrent suite took it since find_free_port
                self.cluster = None
                start = port + 1
        else:
            raise BenchError(f"no free sshd port from {SSH_PORT_FROM}")
        self._check_code_under_test()
        self._check_sessions()

    def close(self) -> None:
        """Kill anything left on the hosts (by PID), stop the cluster, remove the files."""
        try:
            if self.cluster is not None:
                left = kill_processes(find_processes(self.cluster.markers()))
                for proc in left:
                    self.log(f"cleanup: killed leftover {proc}")
                self.cluster.stop()
                self.cluster = None
        finally:
            if not self.keep:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def _make_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Subprocesses must import the clusterlaunch next to this harness, not an
        # installed (or editable-installed elsewhere) copy.
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + old if old else "")
        env["NO_COLOR"] = "1"
        # Measured as installed: with bytecode cached (compiling the sources on
        # every start was 13% of a 32-host exec's CPU where this was set).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def _check_code_under_test(self) -> None:
        probe = subprocess.run(
            [self.python, "-c", "import clusterlaunch; print(clusterlaunch.__file__)"],
            env=self.env,
            cwd=self.workdir,
            capture_output=True,
            text=True,
            check=True,
        )
        where = Path(probe.stdout.strip()).resolve()
        if not where.is_relative_to(REPO):
            raise BenchError(f"subprocesses import clusterlaunch from {where}, not {REPO}")
        self.log(f"code under test: {where.parent}")

    def _check_sessions(self) -> None:
        """The hosts' sessions carry their marker, and skip ~/.bashrc unless --host-rc."""
        host = self.names(1)[0]
        done = self.run(
            self.ssh(host, "echo $SHLVL $CLUSTERLAUNCH_SIM_HOST"), stdout=subprocess.PIPE
        )
        words = done.check().stdout.decode().split()
        expected_level = "1" if self.host_rc else "2"
        if len(words) != 2 or words[0] != expected_level or not words[1].endswith(host):
            raise BenchError(f"unexpected session on {host}: {words} (SHLVL, marker)")
        rc = "sourced" if self.host_rc else "skipped (SHLVL=1)"
        self.log(f"sessions on the hosts: ~/.bashrc {rc}")

    # -- helpers for measurements -----------------------------------------------
    def log(self, message: str) -> None:
        """Progress, to stderr."""
        print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=self.log_stream, flush=True)

    @property
    def ssh_config(self) -> Path:
        """The cluster's OpenSSH client config."""
        assert self.cluster is not None
        return self.cluster.ssh_config

    def names(self, count: int) -> list[str]:
        """The first ``count`` host aliases."""
        assert self.cluster is not None
        if count > self.n_hosts:
            raise BenchError(f"need {count} hosts, the cluster has {self.n_hosts}")
        return self.cluster.names[:count]

    def markers(self) -> list[str]:
        """Markers of every host (what the orphan detector looks for)."""
        assert self.cluster is not None
        return self.cluster.markers()

    def hosts_file(self, count: int, torch: bool = False, python: str | None = None) -> Path:
        """A clusterlaunch hosts file of the first ``count`` hosts, 1 process each.

        ``torch``: the hosts run torch jobs, so use the controller's interpreter
        (which has torch) rather than ``--host-python``; ``python``: this one.
        """
        python = python or (self.python if torch else self.host_python)
        path = self._hosts_files.get((count, python))
        if path is None:
            lines = ["defaults:", f"  python: {json.dumps(python)}", "hosts:"]
            lines += [f"  - host: {name}\n    gpus: 1" for name in self.names(count)]
            path = self.tmp / f"hosts-{count}-{len(self._hosts_files)}.yaml"
            path.write_text("\n".join(lines) + "\n")
            self._hosts_files[(count, python)] = path
        return path

    def master_port(self) -> int:
        """A port not used before in this run and free right now (torchrun's store)."""
        port = self._next_master_port
        while not port_is_free(["0.0.0.0"], port):
            port += 1
        self._next_master_port = port + 1
        return port

    def cl(self, command: str, *args: str, profile_as: str | None = None) -> list[str]:
        """argv of ``clusterlaunch COMMAND --ssh-config CFG ARGS``.

        ``profile_as``: run it under pyinstrument instead, writing the report to
        ``profile_dir/profile-<name>.txt`` (only with ``--profile``).
        """
        tail = ["clusterlaunch", command, "--ssh-config", str(self.ssh_config), *args]
        if profile_as is not None and self.profile_dir is not None:
            report = self.profile_dir / f"profile-{profile_as}.txt"
            return [
                self.python, "-m", "pyinstrument", "--show-all", "--no-color",
                "-r", "text", "-o", str(report), "-m", *tail,
            ]  # fmt: skip
        return [self.python, "-m", *tail]

    def ssh(self, host: str, command: str) -> list[str]:
        """OpenSSH client argv running ``command`` (a shell string) on ``host``."""
        return ["ssh", "-F", str(self.ssh_config), host, command]

    def run(
        self,
        argv: Sequence[str],
        *,
        stdout: Any = subprocess.DEVNULL,
        env: Mapping[str, str] | None = None,
        timeout: float = 300.0,
    ) -> Timed:
        """Run ``argv`` to completion in the workdir, timing it.

        ``stdout``: DEVNULL (default), PIPE (captured), or an open file.
        stderr is always captured (for error messages).
        """
        chosen = dict(env) if env is not None else self.env
        return run_timed(argv, cwd=self.workdir, env=chosen, stdout=stdout, timeout=timeout)

    def assert_clean(self, timeout: float = 5.0) -> list[str]:
        """Problems (as text) if processes are still running on the hosts after ``timeout``.

        Leftovers are killed by PID, so the next run starts clean either way.
        """
        left = wait_until_gone(self.markers(), timeout=timeout)
        if not left:
            return []
        kill_processes(left)
        names = ", ".join(sorted({p.cmdline.split(" ")[0] for p in left}))
        return [f"{len(left)} process(es) left after {timeout:g} s ({names})"]

    def rounds(self, label: str, warmup: int = 1, repeat: int | None = None) -> Iterator[int]:
        """Round numbers: ``warmup`` unrecorded ones (negative), then ``repeat`` recorded
        (default: the run's ``--repeat``)."""
        repeat = self.repeat if repeat is None else repeat
        for index in range(-warmup, repeat):
            tag = "warm-up" if index < 0 else f"{index + 1}/{repeat}"
            self.log(f"{label}: round {tag}")
            yield index
