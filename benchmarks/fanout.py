"""Fan-out: ``clusterlaunch exec HOSTS -- true`` on 1, 8 and 32 hosts.

Baselines on the same hosts, in the same rounds: ``pdsh -R ssh`` (parallel
OpenSSH clients, made to use the cluster's ssh_config) and a serial OpenSSH
loop (``for h in ...; do ssh h true; done``). Every variant is checked once,
with a command that prints the host's marker, to really reach every host.
"""

from __future__ import annotations

import re
import shlex
import subprocess

from benchmarks.core import Result, Target, rotate
from benchmarks.env import Bench
from benchmarks.processes import BenchError

NAME = "fanout"
SIZES = (1, 8, 32)
NEEDS = max(SIZES)
"""How many simulated hosts this measurement uses."""


def pdsh_env(bench: Bench) -> dict[str, str]:
    """pdsh's ssh module, told to pass ``-F <ssh_config>`` (ssh ignores $HOME here)."""
    env = dict(bench.env)
    # pdsh's default is "-2 -a -x -l%u %h"; -F makes ssh read the cluster's aliases.
    env["PDSH_SSH_ARGS"] = f"-F {bench.ssh_config} -2 -a -x -l%u %h"
    env["PDSH_RCMD_TYPE"] = "ssh"
    return env


def pdsh_argv(names: list[str], command: str) -> list[str]:
    """``pdsh -R ssh -w a,b,c COMMAND`` (pdsh's default fan-out, 32)."""
    return ["pdsh", "-R", "ssh", "-w", ",".join(names), command]


def serial_argv(bench: Bench, names: list[str], command: str) -> list[str]:
    """A shell loop of OpenSSH clients, one host after the other."""
    loop = f'for h in {" ".join(names)}; do ssh -F "$CFG" "$h" {command} || exit 1; done'
    return ["sh", "-c", loop]


def _marker_lines(output: bytes) -> set[str]:
    return set(re.findall(r"[0-9a-f]{12}-(node\d+)", output.decode("utf-8", "replace")))


def verify(bench: Bench, count: int) -> None:
    """Each variant runs the command on every one of ``count`` hosts (exactly once)."""
    names = bench.names(count)
    echo = "echo $CLUSTERLAUNCH_SIM_HOST"
    serial_env = dict(bench.env, CFG=str(bench.ssh_config))
    checks = {
        "clusterlaunch": (bench.cl("exec", str(bench.hosts_file(count)), "--", "sh", "-c", echo),
                          bench.env),
        "pdsh": (pdsh_argv(names, echo), pdsh_env(bench)),
        "serial ssh": (serial_argv(bench, names, f"'{echo}'"), serial_env),
    }  # fmt: skip
    for label, (argv, env) in checks.items():
        done = bench.run(argv, stdout=subprocess.PIPE, env=env).check()
        seen = _marker_lines(done.stdout)
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        if seen != set(names) or len(lines) != count:
            raise BenchError(
                f"{label} on {count} hosts reached {sorted(seen)} with {len(lines)} lines"
            )
    bench.log(f"fanout: verified clusterlaunch, pdsh and serial ssh reach all {count} hosts")


def run(bench: Bench) -> list[Result]:
    """Time the three variants on each size, interleaved round by round."""
    results: list[Result] = []
    serial_env = dict(bench.env, CFG=str(bench.ssh_config))
    floor = Result(
        f"{NAME}.startup",
        NAME,
        "clusterlaunch --version (Python start-up + imports floor)",
        "s",
        role="info",
    )
    variants = []
    for count in SIZES:
        names = bench.names(count)
        verify(bench, count)
        cl = Result(
            f"{NAME}.clusterlaunch.{count}",
            NAME,
            f"clusterlaunch exec, {count} host{'s' if count > 1 else ''}",
            "s",
            baseline=f"{NAME}.pdsh.{count}",
        )
        pdsh = Result(f"{NAME}.pdsh.{count}", NAME, f"pdsh -R ssh, {count}", "s", role="baseline")
        serial = Result(
            f"{NAME}.serial.{count}",
            NAME,
            f"serial OpenSSH loop, {count}",
            "s",
            role="baseline",
            baseline=f"{NAME}.pdsh.{count}",
        )
        if count == max(SIZES):
            cl.targets = [
                Target("ratio_max", 0.5, ref=pdsh.key, ref_label=f"pdsh ({count} hosts)"),
                Target("ratio_max", 3.0, ref=f"{NAME}.clusterlaunch.1", ref_label="own 1-host"),
            ]
        hosts = str(bench.hosts_file(count))
        variants += [
            (cl, bench.cl("exec", hosts, "--", "true"), bench.env),
            (pdsh, pdsh_argv(names, "true"), pdsh_env(bench)),
            (serial, serial_argv(bench, names, "true"), serial_env),
        ]
        results += [cl, pdsh, serial]
    host = bench.names(1)[0]
    host_python = Result(
        f"{NAME}.host_python",
        NAME,
        "ssh host python -c pass (the agent's interpreter start-up, 1 host)",
        "s",
        role="info",
        baseline=f"{NAME}.serial.1",
    )
    variants += [
        (floor, [bench.python, "-m", "clusterlaunch", "--version"], bench.env),
        (host_python, bench.ssh(host, f"{shlex.quote(bench.host_python)} -c pass"), bench.env),
    ]
    for index in bench.rounds(NAME):
        for result, argv, env in rotate(variants, index):
            done = bench.run(argv, env=env).check()
            if index >= 0:
                result.samples.append(done.seconds)
                result.extra.setdefault("local_cpu_s", []).append(round(done.cpu_s, 4))
                if result.role == "clusterlaunch":
                    result.extra.setdefault("peak_rss_kib", []).append(done.peak_rss_kib)
    leftovers = bench.assert_clean()
    for result in results:
        result.problems += leftovers
    if bench.profile_dir is not None:
        for count in (1, max(SIZES)):
            argv = bench.cl(
                "exec", str(bench.hosts_file(count)), "--", "true", profile_as=f"fanout-{count}"
            )
            bench.run(argv).check()
    return [*results, floor, host_python]


__all__ = ["NAME", "run"]
