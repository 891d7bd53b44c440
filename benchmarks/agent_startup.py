"""What ``json`` and ``argparse`` would cost the agent's start-up (``python -S``).

    python -m benchmarks.agent_startup [--rounds 200]

Every measurement runs ``--rounds`` times in fresh ``python -S`` processes,
interleaved, and is shown as median (quartiles):

* ``import json`` and ``import argparse`` after what the agent imports anyway
  (os, select, _signal, ctypes, ...): the cumulative ``-X importtime`` of
  that one import, i.e. its marginal cost;
* inside the process (``time.perf_counter``): encoding one event with
  ``json.dumps``; building an argparse parser for the agent's six options,
  and parsing the argv the planner writes with it; the agent's own
  ``parse_args`` on the same argv;
* the agent's whole start-up, wall time of ``python -S`` running the agent
  bundle as shipped up to its parsed arguments and first encoded event, and
  the same with the argument parsing done by argparse instead.

With ``--against DIR`` (another checkout, e.g. a worktree of main) it also
times that checkout's agent bundle the same way, interleaved with this one's,
and both bundles' imports (``-X importtime``: the sum of the top-level
cumulative times, so every module the start-up imports counts once).

Not part of ``python -m benchmarks``: it needs no cluster and compares
clusterlaunch with no other tool. The numbers are quoted in
:func:`clusterlaunch.remote.wire.parse_args`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clusterlaunch.remote import program_source

AGENT_IMPORTS = "import ctypes, errno, fcntl, itertools, os, select, _signal, sys, time, zlib"
ARGV = ["--job-id", "j1", "--node-rank", "0", "--grace", "5", "--heartbeat-timeout", "15"]
ARGV += ["--first-rank", "0", "--rank-files", "--", "python3", "-m", "x"]
EVENT = "{'event': 'started', 'pid': 1, 'agent_pid': 2, 'hostname': 'h', 'subreaper': True}"
OPTIONS = """
parser = argparse.ArgumentParser(prog="clusterlaunch-agent", allow_abbrev=False)
parser.add_argument("--job-id", required=True)
parser.add_argument("--node-rank", type=int, required=True)
parser.add_argument("--grace", type=float, required=True)
parser.add_argument("--heartbeat-timeout", type=float, required=True)
parser.add_argument("--first-rank", type=int, default=0)
parser.add_argument("--rank-files", action="store_true")
"""
WITH_ARGPARSE = f"""
import argparse
def parse_args(argv):
{OPTIONS.replace(chr(10), chr(10) + "    ")}
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.argv = argv[split + 1 :]
    return args
"""
# After the bundle (which defines everything; main() is not run).
START = f"parse_args(sys.argv[1:]); Output(fd=-1).event(**{EVENT})"
STEPS = f"""
clock = time.perf_counter
t0 = clock(); to_json({EVENT})
t1 = clock(); parse_args(sys.argv[1:])
t2 = clock(); import argparse
t3 = clock()
{OPTIONS}
t4 = clock(); parser.parse_args(sys.argv[1 : sys.argv.index("--")])
t5 = clock()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
"""


def import_cost_s(python: str, module: str) -> float:
    """Seconds ``import module`` takes (cumulative) after the agent's own imports."""
    code = f"{AGENT_IMPORTS}; import {module}"
    result = subprocess.run(
        [python, "-S", "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    )
    for line in result.stderr.splitlines():
        fields = [part.strip() for part in line.split("|")]
        if len(fields) == 3 and fields[2] == module:  # top level: not indented
            return int(fields[1]) / 1e6
    raise RuntimeError(f"no importtime line for {module}:\n{result.stderr}")


def bundle_imports_s(python: str, script: Path) -> float:
    """Seconds the start-up of ``script`` spends importing (``-X importtime``, top level)."""
    result = subprocess.run(
        [python, "-S", "-X", "importtime", str(script), *ARGV], capture_output=True, text=True
    )
    total = 0
    for line in result.stderr.splitlines():
        fields = line.split("|")
        top_level = len(fields) == 3 and not fields[2][1:].startswith(" ")
        if top_level and line.startswith("import time:") and fields[1].strip().isdigit():
            total += int(fields[1])
    return total / 1e6


def other_bundle(checkout: str) -> str:
    """The agent bundle of another checkout (its own ``program_source``).

    Before this was run with ``-S`` in that checkout, it silently read this
    checkout's bundle where the package is installed editable.
    """
    code = "import sys; from clusterlaunch.remote import program_source as p; "
    code += "sys.stdout.write(p('agent').decode())"
    # -S: no site, so no editable install's finder, which would import this checkout's
    # package whatever PYTHONPATH says; and run there, as -c puts the cwd first on sys.path.
    env = dict(os.environ, PYTHONPATH=checkout)
    argv = [sys.executable, "-S", "-c", code]
    source = subprocess.run(
        argv, capture_output=True, text=True, check=True, env=env, cwd=checkout
    ).stdout
    if source == program_source("agent").decode():
        raise SystemExit(f"--against {checkout}: the same agent bundle as this checkout's")
    return source


def wall_s(argv: list[str], cpu: list[float] | None = None) -> float:
    """Wall seconds of ``argv``; its CPU seconds (user+sys, less hurt by load) into ``cpu``."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv)
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return elapsed


def shown(values: list[float]) -> str:
    low, median, high = statistics.quantiles(values, n=4)
    return f"{median * 1000:6.2f} ms ({low * 1000:.2f}-{high * 1000:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.agent_startup")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--against", metavar="DIR", help="also time this checkout's agent")
    args = parser.parse_args()
    bundle = program_source("agent").decode()
    bundle = bundle.replace('if __name__ == "__main__":', "if False:")  # define, do not run
    other = other_bundle(args.against) if args.against else None
    if other is not None:
        other = other.replace('if __name__ == "__main__":', "if False:")
    results: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        results.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory() as tmp:
        scripts = {
            "start-up, as shipped": bundle + "\n" + START,
            "start-up, argparse instead": bundle + WITH_ARGPARSE + START,
            "steps": bundle + "\n" + STEPS,
        }
        if other is not None:
            scripts["start-up, --against"] = other + "\n" + START
        paths = {name: Path(tmp, f"{i}.py") for i, name in enumerate(scripts)}
        for name, text in scripts.items():
            paths[name].write_text(text + "\n")
        for _ in range(args.rounds):
            for module in ("json", "argparse"):
                note(f"import {module}", import_cost_s(args.python, module))
            steps = subprocess.run(
                [args.python, "-S", str(paths["steps"]), *ARGV],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            encode, own, _, build, parse = map(float, steps)  # the import: -X importtime
            note("to_json of one event", encode)
            note("the agent's own parse_args", own)
            note("argparse: build the parser", build)
            note("argparse: parse the argv", parse)
            names = ["start-up, as shipped", "start-up, argparse instead"]
            names += ["start-up, --against"] if other is not None else []
            for name in names:
                cpu = results.setdefault(f"CPU {name}", [])
                note(name, wall_s([args.python, "-S", str(paths[name]), *ARGV], cpu))
            if other is not None:
                for name in ("start-up, as shipped", "start-up, --against"):
                    note(f"imports, {name[10:]}", bundle_imports_s(args.python, paths[name]))
    version = sys.version.split()[0] if args.python == sys.executable else args.python
    print(f"Python {version}, {args.rounds} rounds, load average now {os.getloadavg()[0]:.2f}")
    print("median (quartiles)")
    for name, values in results.items():
        print(f"{name:32} {shown(values)}")
    pairs = zip(results["start-up, as shipped"], results["start-up, argparse instead"], strict=True)
    print(f"{'argparse - shipped, paired':28} {shown([b - a for a, b in pairs])}")
    if other is not None:
        for kind in ("", "CPU "):
            pairs = zip(
                results[f"{kind}start-up, as shipped"],
                results[f"{kind}start-up, --against"],
                strict=True,
            )
            label = f"{kind}--against - shipped, paired"
            print(f"{label:32} {shown([b - a for a, b in pairs])}")


if __name__ == "__main__":
    main()
