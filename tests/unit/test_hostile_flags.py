"""Malformed command lines, one table: each exits 2 with one line and contacts nothing.

Each case goes through ``clusterlaunch.cli.main`` without ``--dry-run``
wherever the command allows it, so a check that let the input through would go
on to dial the hosts, which resolve to the trap listener (tests/unit/hostile.py).
"""

from __future__ import annotations

import pytest

from clusterlaunch.cli.main import main
from tests.unit.hostile import (  # noqa: F401
    Sandbox,
    assert_refused,
    fresh_sandbox,
    sandbox,
    shared_parser,
    shared_sandbox,
    trap,
    with_config,
)

BAD = "\udcff"  # how Python hands over a non-UTF-8 byte (0xff) from argv


def run(*flags: str) -> list[str]:
    return ["run", *flags, "hosts.yaml", "train.py"]


def _numbers() -> list[tuple[str, list[str], str]]:
    """Every number flag, with values float() takes but no range should."""
    ranges = {
        "--grace": "from 0 to 3,600",
        "--timeout": "from 1 to 31,536,000",
        "--heartbeat-timeout": "from 2 to 86,400",
        "--connect-timeout": "from 1 to 3,600",
    }
    values = ["nan", "inf", "-inf", "-1", "1e3", "1_0", "", " 5", "\u0663", "99999999999", "0x10"]
    cases = [(f"{flag}={value!r}", run(flag, value), flag) for flag in ranges for value in values]
    cases += [
        ("--timeout=0", run("--timeout", "0"), ranges["--timeout"]),
        ("--connect-timeout=0", run("--connect-timeout", "0"), ranges["--connect-timeout"]),
        ("--heartbeat-timeout=1", run("--heartbeat-timeout", "1"), ranges["--heartbeat-timeout"]),
        ("--grace=3601", run("--grace", "3601"), ranges["--grace"]),
    ]
    for value in ["0", "-1", "x", "1.5", "99999", "", "nan"]:
        cases.append((f"--fanout={value!r}", run("--fanout", value), "from 1 to 4,096"))
    for value in ["0", "65536", "-1", "abc", "", " 80", "\u0668\u0660", "1e3", "80.0"]:
        cases.append((f"--master-port={value!r}", run("--master-port", value), "--master-port"))
    for value in ["0", "x", "1025"]:
        cases.append((f"--gpus-per-host={value!r}", run("--gpus-per-host", value), "1 to 1,024"))
    return cases


TEXT = [
    # argparse made '--' an empty list: a traceback, or (numbers) an option ignored.
    ("dash-torchrun-args", run("--torchrun-args=--"), "--torchrun-args: '--' is not a value"),
    ("dash-env", run("--env=--"), "--env: '--' is not a value"),
    ("dash-timeout", run("--timeout=--"), "--timeout: '--' is not a value"),
    ("dash-exec", ["exec", "--python=--", "hosts.yaml", "true"], "--python: '--' is not a value"),
    ("workdir-empty", run("--workdir", ""), "--workdir '': give a non-empty value"),
    ("workdir-blank", run("--workdir", "  "), "give a non-empty value"),
    ("workdir-bytes", run("--workdir", "/data/" + BAD), "--workdir '/data/\\xff': not valid UTF-8"),
    ("python-empty", run("--python", ""), "--python '': give a non-empty value"),
    ("python-equals", run("--python", "a=b"), "without '='"),
    ("python-newline", run("--python", "py\nthon"), "without '='"),
    ("python-bytes", run("--python", BAD), "not valid UTF-8"),
    ("env-empty", run("--env", ""), "expected KEY=VALUE"),
    ("env-no-equals", run("--env", "FOO"), "--env: expected KEY=VALUE"),
    ("env-no-name", run("--env", "=x"), "not a valid variable name"),
    ("env-digit-name", run("--env", "1A=2"), "not a valid variable name"),
    ("env-rank", run("--env", "RANK=1"), "RANK is set by torchrun"),
    ("env-ssh", run("--env", "SSH_AUTH_SOCK=x"), "SSH_*"),
    ("env-cuda", run("--env", "CUDA_VISIBLE_DEVICES=0"), "devices:"),
    # torchrun reads its options from PET_*: PET_STANDALONE=1 hung, PET_TEE=3 doubled lines.
    ("env-pet-standalone", run("--env", "PET_STANDALONE=1"), "sets torchrun's --standalone"),
    ("env-pet-tee", run("--env", "PET_TEE=3"), "PET_TEE sets torchrun's --tee; give"),
    ("env-bytes", run("--env", "A=" + BAD), "--env A=...: its value is not valid UTF-8 (the"),
    ("env-name-bytes", run("--env", BAD + "=1"), "--env '\\xff': not valid UTF-8"),
    ("forward-env-empty", run("--forward-env", ""), "--forward-env '': give a non-empty"),
    # These could match no variable, and forwarded nothing, silently.
    ("forward-env-assign", run("--forward-env", "T_*=x"), "to set one, use --env NAME=VALUE"),
    ("forward-env-space", run("--forward-env", "A B"), "--forward-env 'A B': a pattern names"),
    ("forward-env-dollar", run("--forward-env", "$HOME"), "a pattern names variables"),
    ("ssh-config-empty", run("--ssh-config", ""), "--ssh-config '': give a non-empty value"),
    ("ssh-config-missing", run("--ssh-config", "nope"), "--ssh-config nope: no such file"),
    (
        "ssh-config-timeout-nan",
        run("--ssh-config", "nan_timeout_config"),
        "nan_timeout_config:2, host node0: ConnectTimeout 'nan': "
        "use a number of seconds from 1 to 3,600",
    ),
    (
        "ssh-config-port-word",
        run("--ssh-config", "word_port_config"),
        "word_port_config:2, host node0: Port 'abc': use a TCP port from 1 to 65,535",
    ),
    ("log-dir-empty", run("--log-dir", ""), "--log-dir '': give a non-empty value"),
    ("job-id-empty", run("--job-id", ""), "--job-id '': use 1-64 letters"),
    ("job-id-space", run("--job-id", "a b"), "use 1-64 letters"),
    ("job-id-long", run("--job-id", "x" * 65), "use 1-64 letters"),
    ("job-id-path", run("--job-id", "../x"), "use 1-64 letters"),
    ("job-id-dash", run("--job-id=-x"), "beginning with a letter or digit"),
    ("job-id-bytes", run("--job-id", BAD), "--job-id '\\xff': use 1-64 letters"),
    ("master-addr-empty", run("--master-addr", ""), "--master-addr '': is empty"),
    ("master-addr-subshell", run("--master-addr", "a$(id)"), "contains '$'"),
    ("master-addr-semicolon", run("--master-addr", "a;b"), "contains ';'"),
    ("master-addr-option", run("--master-addr=-oProxyCommand=x"), "starts with '-'"),
    ("master-addr-space", run("--master-addr", "a b"), "contains ' '"),
    ("master-addr-user", run("--master-addr", "u@h"), "contains '@'"),
    ("master-addr-percent", run("--master-addr", "a%h"), "contains '%'"),
    ("master-addr-long", run("--master-addr", "a" * 256), "longer than 255"),
    ("script-bytes", ["run", "hosts.yaml", BAD + ".py"], "SCRIPT '\\xff.py': not valid UTF-8"),
    ("script-missing", ["run", "hosts.yaml", "nope.py"], "nope.py: no such script here"),
    ("script-blank", ["run", "hosts.yaml", " "], "SCRIPT ' ': give a non-empty value"),
    ("script-arg-bytes", ["run", "hosts.yaml", "train.py", BAD], "SCRIPT_ARGS '\\xff'"),
    ("exec-arg-bytes", ["exec", "hosts.yaml", "--", "echo", BAD], "COMMAND '\\xff'"),
    ("hosts-blank", ["run", "", "train.py"], "HOSTS '': give a non-empty value"),
]

RANKS = [
    (f"--ranks={value!r}", run("--ranks", value), fragment)
    for value, fragment in [
        ("", "--ranks '': use ranks and ranges"),
        (" ", "use ranks and ranges"),
        (",", "use ranks and ranges"),
        ("0,,1", "use ranks and ranges"),
        ("x", "use ranks and ranges"),
        ("-1", "use ranks and ranges"),
        ("1-", "use ranks and ranges"),
        ("5-2", "range 5-2 runs backwards"),
        ("9", "the job has ranks 0-3 only"),
        ("0-99999999999", "the job has ranks 0-3 only"),
        ("9" * 30, "use ranks and ranges"),
        ("\u0661", "use ranks and ranges"),
    ]
]

TORCHRUN = [
    (f"torchrun-args={value!r}", run(f"--torchrun-args={value}"), fragment)
    for value, fragment in [
        ("-r0", "(--redirects)"),
        ("-t3", "(--tee)"),
        ("-r 0", "(--redirects)"),
        ("-r=0", "(--redirects)"),
        ("-mr0", "(--redirects)"),
        ("--tee=3", "(--tee)"),
        ("--te 3", "(--tee)"),
        ("--t 3", "(--tee)"),
        ("--redirects=3", "(--redirects)"),
        ("--red 3", "(--redirects)"),
        ("--log_dir=x", "(--log-dir)"),
        ("--log-dir x", "(--log-dir)"),
        ("--nproc_per_node=2", "(--nproc-per-node)"),
        ("--nnodes 2", "(--nnodes)"),
        ("--node 1", "(--node-rank)"),
        ("--master x", "(--master-addr or --master-port)"),
        ("--master_port=1", "(--master-port)"),
        ("--rdzv_conf=x", "--rdzv_conf 'x': write KEY=VALUE[,KEY=VALUE...]"),
        ("--rdzv-conf timeout=abc", "--rdzv-conf 'timeout=abc': write KEY=VALUE"),
        ("--rdzv-conf timeout=0", "--rdzv-conf 'timeout=0': write KEY=VALUE"),
        ("--rdzv-conf a=1,,b=2", "--rdzv-conf 'a=1,,b=2': write KEY=VALUE"),
        ("--rdzv 1", "(--rdzv-backend or --rdzv-endpoint)"),
        ("--rdzv_backend c10d", "(--rdzv-backend)"),
        ("--local-ranks-filter 0", "(--local-ranks-filter)"),
        ("--logs_specs x", "(--logs-specs)"),
        ("--run-path", "(--run-path)"),
        ('"unclosed', "No closing quotation"),
        ("other.py", "'other.py' is not an option or an option's value"),
        ("--max-restarts 3 other.py", "'other.py' is not an option"),
        ("-m", "-m is clusterlaunch's own -m; write clusterlaunch run -m HOSTS MODULE"),
        ("--module", "--module is clusterlaunch's own -m"),
        ("--no_python", "--no_python is clusterlaunch's own --no-python"),
        ("--no-py", "--no-py is clusterlaunch's own --no-python"),
        (BAD, "--torchrun-args '\\xff': not valid UTF-8"),
        # Each node made up its own run id (the job hung), or torchrun crashed on the '/'.
        ("--rdzv-id=", "--torchrun-args: --rdzv-id '': use 1-64 letters"),
        ("--rdzv-id ''", "--torchrun-args: --rdzv-id '': use 1-64 letters"),
        ("--rdzv_id a/b", "--torchrun-args: --rdzv-id 'a/b': use 1-64 letters"),
        ("--rdzv-id=-x", "--rdzv-id '-x': use 1-64 letters"),
        ("--rdzv-i x", "--rdzv-i: write --rdzv-id in full"),
        # torchrun took SCRIPT for the missing value, or failed on every host.
        ("--max-restarts", "--max-restarts needs a value (torchrun would take the script"),
        ("--role --max-restarts 1", "--role needs a value before --max-restarts"),
        # torchrun printed its help on every host and exited 0.
        ("-h", "-h would print torchrun's help on every host and start nothing"),
        ("--help", "--help would print torchrun's help"),
        ("--he", "--he would print torchrun's help"),
        ("--max-restarts 1 -h", "-h would print torchrun's help"),
        # Found by a helper: each failed on every host, or refused a valid value.
        ("--role x --", "'--' would end torchrun's options"),
        ("--virtual-local-rank=1", "--virtual-local-rank takes no value"),
        ("--role -.", "--role needs a value before -."),
        ("--role -1.2.3", "--role needs a value before -1.2.3"),
        # torchrun took them, then stopped on every host with a traceback.
        ("--max-restarts -1", "--max-restarts '-1': use a whole number, 0 or more"),
        ("--max_restarts=-1", "--max_restarts '-1': use a whole number, 0 or more"),
        ("--max-r -1", "--max-r '-1': use a whole number"),
        ("--max-restarts x", "--max-restarts 'x': use a whole number"),
        ("--monitor-interval 0", "--monitor-interval '0': use a number of seconds above 0"),
        ("--monitor_interval=-1", "'-1': use a number of seconds above 0"),
        ("--monitor-interval nan", "'nan': use a number of seconds above 0"),
        ("--monitor-interval inf", "'inf': use a number of seconds above 0"),
        ("--shutdown-timeout -1", "--shutdown-timeout '-1': use a whole number of seconds"),
        ("--standalone", "would replace the static rendezvous clusterlaunch sets"),
    ]
]

SHAPE = [
    ("grace-twice", run("--grace", "1", "--grace", "60"), "--grace is given twice"),
    ("workdir-twice", run("--workdir", "/a", "--workdir", "/b"), "--workdir is given twice"),
    ("timeout-twice", run("--timeout", "5", "--timeout", "5"), "--timeout is given twice"),
    ("python-twice", run("--python", "a", "--python", "b"), "--python is given twice"),
    ("job-id-twice", run("--job-id", "a", "--job-id", "b"), "--job-id is given twice"),
    ("port-twice", run("--master-port", "1", "--master-port", "2"), "given twice"),
    ("log-dir-twice", run("--log-dir", "a", "--log-dir", "b"), "--log-dir is given twice"),
    ("ranks-twice", run("--ranks", "0", "--ranks", "1"), "--ranks is given twice"),
    ("abbrev-grace", run("--gra", "1"), "unrecognized arguments: --gra"),
    ("abbrev-timeout", run("--time", "5"), "unrecognized arguments"),
    ("abbrev-workdir", run("--work", "x"), "unrecognized arguments"),
    ("json-without-dry-run", run("--json"), "--json goes with --dry-run"),
    ("unknown-command", ["bogus"], "invalid choice: 'bogus'"),
    ("no-command", [], "the following arguments are required"),
    ("run-no-script", ["run", "hosts.yaml"], "the following arguments are required"),
    ("exec-no-command", ["exec", "hosts.yaml"], "exec: give a command after --"),
    ("exec-empty-command", ["exec", "hosts.yaml", "--"], "exec: give a command after --"),
    ("exec-blank-command", ["exec", "hosts.yaml", "--", ""], "exec: give a command after --"),
    ("check-grace", ["check", "--grace", "1", "hosts.yaml"], "unrecognized arguments: --grace"),
    ("check-python-blank", ["check", "--python", " ", "hosts.yaml"], "give a non-empty value"),
    ("ps-python-empty", ["ps", "--python", "", "hosts.yaml"], "--python '': give a non-empty"),
    ("ps-fanout-zero", ["ps", "--fanout", "0", "hosts.yaml"], "from 1 to 4,096"),
    ("kill-bad-id", ["kill", "hosts.yaml", "bad id!"], "JOB_ID 'bad id!': use 1-64 letters"),
    ("kill-empty-id", ["kill", "hosts.yaml", ""], "JOB_ID '': use 1-64 letters"),
    ("kill-subshell-id", ["kill", "hosts.yaml", "$(id)"], "use 1-64 letters"),
    ("kill-long-id", ["kill", "hosts.yaml", "x" * 100], "use 1-64 letters"),
    ("kill-bytes-id", ["kill", "hosts.yaml", BAD], "JOB_ID '\\xff'"),
    ("kill-timeout", ["kill", "--connect-timeout", "nan", "hosts.yaml", "x"], "from 1 to"),
    ("sandbox-hosts-zero", ["sandbox", "up", "--hosts", "0"], "--hosts '0': use a whole number"),
    ("sandbox-gpus-huge", ["sandbox", "up", "--gpus", "10000000000"], "from 1 to 1,024"),
    ("sandbox-port", ["sandbox", "up", "--port", "70000"], "--port '70000': use a TCP port"),
    ("sandbox-dir-empty", ["sandbox", "down", "--dir", ""], "--dir '': give a non-empty value"),
]

CASES = [*_numbers(), *TEXT, *RANKS, *TORCHRUN, *SHAPE]


@pytest.mark.parametrize(
    ("argv", "fragment"), [pytest.param(argv, frag, id=name) for name, argv, frag in CASES]
)
def test_refused_before_any_host_is_contacted(
    sandbox: Sandbox,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fragment: str,
) -> None:
    assert_refused(sandbox, argv, capsys, fragment)


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 150
    assert len({name for name, _, _ in CASES}) == len(CASES)


def test_the_trap_is_real(fresh_sandbox: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """Control: valid input does reach the trap (and the ProxyCommand runs), so
    "nothing contacted" above means something."""
    assert main(with_config(["run", "--connect-timeout", "1", "hosts.yaml", "train.py"])) == 2
    assert "preflight failed on 2 host(s)" in capsys.readouterr().err
    assert len(fresh_sandbox.trap.dialed) >= 2
    (fresh_sandbox.root / "pxn.yaml").write_text("hosts:\n  - {host: pxn1, gpus: 1}\n")
    assert main(with_config(["run", "--connect-timeout", "1", "pxn.yaml", "train.py"])) == 2
    assert (fresh_sandbox.marks / "proxy-command-ran").exists()
