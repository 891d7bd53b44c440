"""Malformed and hostile hosts files, one table: exit 2, one line, nothing contacted.

The heavy cases (alias bomb, deep nesting, huge ranges and counts, /dev/zero)
also run in a subprocess whose own CPU time and peak memory are measured.
"""

from __future__ import annotations

import pytest

from tests.unit.hostile import (  # noqa: F401
    MAX_RSS_MB,
    MAX_SECONDS,
    Sandbox,
    assert_refused,
    run_measured,
    sandbox,
    shared_parser,
    shared_sandbox,
    trap,
)

PWN = "pxn$(touch${IFS}{dir}/marks/pwned)"  # runs if a shell ever sees it


def entry(host: str, extra: str = "", gpus: str = "1") -> str:
    return f"hosts:\n  - host: '{host}'\n    gpus: {gpus}\n{extra}"


def _bomb() -> str:
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(levels) + "\nhosts: *i\n"


HOST_NAMES = [
    ("pxn-subshell", entry(PWN), "contains '$', which OpenSSH refuses"),
    ("pxn-subshell-space", entry("pxn$(touch /tmp/x)"), "contains '$'"),
    ("pxn-backticks", entry("pxn`id`"), "contains '`'"),
    ("pxn-semicolon", entry("pxn;id"), "contains ';'"),
    ("pxn-pipe", entry("pxn|id"), "contains '|'"),
    ("pxn-ampersand", entry("pxn&id"), "'pxn&id' stands for no host"),  # NodeSet's &
    ("pxn-less", entry("pxn<x"), "contains '<'"),
    ("pxn-greater", entry("pxn>x"), "contains '>'"),
    ("pxn-parens", entry("pxn(x)"), "contains '('"),
    ("pxn-braces", entry("pxn{a,b}"), "which OpenSSH refuses in a host name"),
    ("pxn-comma", entry("pxn$(id),x"), "contains '$'"),  # a comma joins names: each is checked
    ("pxn-double-quote", 'hosts:\n  - {host: "pxn\\"x", gpus: 1}\n', "contains '\"'"),
    ("pxn-backslash", entry("pxn\\x"), "contains '\\\\'"),
    ("pxn-percent", entry("pxn%h"), "contains '%'"),
    ("pxn-escape", 'hosts:\n  - {host: "pxn\\e[31m", gpus: 1}\n', "unbalanced brackets"),
    ("pxn-escape-alone", 'hosts:\n  - {host: "pxn\\e", gpus: 1}\n', "contains '\\x1b'"),
    ("pxn-bell", 'hosts:\n  - {host: "pxn\\a", gpus: 1}\n', "contains '\\x07'"),
    ("pxn-line-separator", 'hosts:\n  - {host: "pxn\\u2028x", gpus: 1}\n', "contains '\\u2028'"),
    ("pxn-zero-width", 'hosts:\n  - {host: "pxn\\u200bx", gpus: 1}\n', "contains '\\u200b'"),
    ("pxn-dash", entry("-oProxyCommand=x"), "starts with '-'"),
    ("pxn-user", entry("alice@pxn1"), "has a user in it; write host: 'pxn1' and user: 'alice'"),
    ("host-empty", entry(""), "must be a host name"),
    ("host-blank", entry("   "), "must be a host name"),
    ("host-long", entry("a" * 300), "longer than 255"),
    ("host-number", "hosts:\n  - {host: 12, gpus: 1}\n", "must be a host name, got 12"),
    ("host-null", "hosts:\n  - {host: null, gpus: 1}\n", "must be a host name"),
    ("host-list", "hosts:\n  - {host: [a], gpus: 1}\n", "must be a host name"),
    ("host-nul", 'hosts:\n  - {host: "a\\0", gpus: 1}\n', "a NUL or a lone surrogate"),
    ("host-surrogate", 'hosts:\n  - {host: "a\\udcff", gpus: 1}\n', "YAML"),
]

RANGES = [
    ("range-billion", entry("gpu[1-1000000000]"), "stands for 1,000,000,000 hosts"),
    ("range-million", entry("gpu[1-1000000]"), "stands for 1,000,000 hosts"),
    ("range-4097", entry("gpu[0-4096]"), "a job has at most 4,096 hosts"),
    ("range-2d", entry("r[1-100]-n[1-100]"), "stands for 10,000 hosts"),
    ("range-over-entries", entry("a[1-4000]") + "  - {host: 'b[1-97]', gpus: 1}\n", "only 96"),
    ("range-operator-empty", entry("gpu[1-5]!gpu[1-5]"), "stands for no host"),
    ("range-operator-flood", entry("n[1-100000]!n[1-99999]"), "stand for 199,999 names"),
    ("range-trailing-comma", entry("nova6,"), "missing nodeset operand with ','"),
    ("range-double-comma", entry("foo,,bar"), "missing nodeset operand with ','"),
    ("range-trailing-bang", entry("foo!"), "missing nodeset operand with '!'"),
    ("range-group", entry("@gpus[1-2]"), "is a ClusterShell group; clusterlaunch reads no group"),
    ("range-group-operand", entry("gpu1,@all"), "'@all' is a ClusterShell group"),
    ("range-letters", entry("gpu[a-b]"), "'a-b' is not N, N-M or N-M/STEP"),
    ("range-open", entry("gpu[1-"), "unbalanced brackets"),
    ("range-backwards", entry("gpu[5-1]"), "runs backwards"),
    ("range-empty", entry("gpu[]"), "'' is not N, N-M or N-M/STEP"),
    ("range-nested", entry("gpu[[1-2]]"), "unbalanced brackets"),
    ("range-subshell", entry("pxn[1-2]$(id)"), "'pxn1$(id)' contains '$'"),
    ("range-comma-name", entry("gpu[1-2],pxn;x"), "'pxn;x' contains ';'"),
    ("range-step-zero", entry("gpu[1-9/0]"), "has a step that is not a positive number"),
    ("range-with-addr", entry("gpu[1-2]", "    addr: 10.0.0.1\n"), "cannot be combined"),
    ("range-twice", entry("gpu[1-3]") + "  - {host: gpu2, gpus: 1}\n", "gpu2 is listed twice"),
]

FIELDS = [
    ("gpus-trillion", entry("a", gpus="1000000000000"), "positive integer up to 1,024"),
    ("gpus-auto-typo", entry("a", gpus="Auto"), "must be auto or a positive integer"),
    ("gpus-1025", entry("a", gpus="1025"), "positive integer up to 1,024, got 1025"),
    ("gpus-zero", entry("a", gpus="0"), "positive integer"),
    ("gpus-negative", entry("a", gpus="-1"), "positive integer"),
    ("gpus-word", entry("a", gpus="four"), "got 'four'"),
    ("gpus-float", entry("a", gpus="2.5"), "got 2.5"),
    ("gpus-bool", entry("a", gpus="true"), "got true, which YAML reads as True"),
    ("gpus-digits", entry("a", gpus="'" + "9" * 5000 + "'"), "positive integer"),
    ("gpus-huge-int", entry("a", gpus="9" * 5000), "YAML value error: Exceeds the limit"),
    ("world-too-big", entry("gpu[1-100]", gpus="1000"), "a job has at most 65,536 ranks"),
    ("user-semicolon", entry("a", "    user: 'x;id'\n"), "contains ';', which OpenSSH refuses"),
    ("user-subshell", entry("a", "    user: '$(id)'\n"), "contains '('"),
    ("user-backtick", entry("a", "    user: 'a`b`'\n"), "contains '`'"),
    ("user-dash", entry("a", "    user: -oProxyCommand=x\n"), "starts with '-'"),
    ("user-space-dash", entry("a", "    user: 'a -b'\n"), "a '-' after a space"),
    ("user-backslash-end", entry("a", "    user: 'a\\'\n"), "ends with a backslash"),
    ("user-tab", entry("a", '    user: "a\\tb"\n'), "contains '\\t'"),
    ("defaults-user", "defaults: {user: 'a|b'}\n" + entry("a")[0:], "defaults.user"),
    ("addr-subshell", entry("a", "    addr: 'a$(id)'\n"), "hosts[0].addr: 'a$(id)' contains '$'"),
    ("addr-user", entry("a", "    addr: u@h\n"), "contains '@'"),
    ("addr-dash", entry("a", "    addr: -x\n"), "starts with '-'"),
    ("master-addr-space", "master_addr: 'a b'\n" + entry("a"), "master_addr: 'a b' contains"),
    ("master-addr-semicolon", "master_addr: 'a;b'\n" + entry("a"), "contains ';'"),
    ("master-port-zero", "master_port: 0\n" + entry("a"), "master_port: must be auto or"),
    ("port-big", entry("a", "    port: 70000\n"), "must be a TCP port 1-65535"),
    ("env-surrogate", entry("a", '    env: {A: "\\ud800"}\n'), "YAML"),
    ("env-rank", entry("a", "    env: {RANK: '1'}\n"), "RANK is set by torchrun"),
    ("env-bool", entry("a", "    env: {A: true}\n"), "got true, which YAML reads as True"),
    ("python-equals", entry("a", "    python: a=b\n"), "without '='"),
    ("workdir-empty", entry("a", "    workdir: ''\n"), "must be a non-empty string"),
    ("devices-mismatch", entry("a", "    devices: [0, 1]\n"), "has 2 entries but gpus is 1"),
    ("devices-bomb", entry("a", "    devices: [" + "0," * 2000 + "0]\n"), "lists a GPU twice"),
]

YAML = [
    ("alias-bomb", _bomb(), "more than 65,536 YAML values"),
    ("deep-5000", "hosts: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 32 levels"),
    ("deep-flow-maps", "hosts: " + "{a: " * 100 + "1" + "}" * 100 + "\n", "nested deeper"),
    ("recursive-alias", "hosts: &a [*a]\n", "alias *a is used inside its own anchor"),
    ("many-values", "hosts: [" + "1," * 70_000 + "1]\n", "more than 65,536 YAML values"),
    ("bad-date", "x: 2001-13-45\n" + entry("a"), "YAML value error: month must be in 1..12"),
    ("tab", "hosts:\n\t- host: a\n", "found character '\\t' that cannot start any token"),
    ("duplicate-key", "hosts: []\nhosts: []\n", "duplicate key 'hosts'"),
    ("unknown-key", "hostz: []\n", "unknown key"),
    ("two-documents", entry("a") + "---\n" + entry("b"), "YAML syntax error"),
    ("binary-tag", "hosts: !!binary aGk=\n", "must be a list of hosts"),
    ("python-tag", "hosts: !!python/object:os.system [id]\n", "YAML"),
    ("not-a-mapping", "- a\n", "expected a mapping with a hosts: list"),
    (
        "entry-repr",
        "hosts:\n  - &x [" + "y," * 300 + "y]\n  - *x\n",
        "got ['y', 'y', 'y', 'y', ...]",
    ),
    ("control-char", "hosts: [\x07]\n", "YAML syntax error"),
]

MPI = [
    ("mpi-subshell", "pxn$(id) slots=1\n", "contains '$'"),
    ("mpi-semicolon", "pxn;id\n", "contains ';'"),
    ("mpi-backtick", "pxn`id`\n", "contains '`'"),
    ("mpi-slots-zero", "gpu1 slots=0\n", "bad.yaml:1: slots: must be a positive integer"),
    ("mpi-slots-huge", "gpu1 slots=1000000000000\n", "up to 1,024"),
    ("mpi-range-billion", "gpu[1-1000000000] slots=1\n", "stands for 1,000,000,000 hosts"),
    ("mpi-many-lines", "".join(f"n{i}\n" for i in range(4097)), "more than 4,096 hosts"),
    ("mpi-unknown-option", "gpu1 slot=2\n", "unknown option 'slot'"),
    ("mpi-slots-twice", "gpu1 slots=2 slots=3\n", "bad.yaml:1: slots= is given twice"),
    ("mpi-max-slots-word", "gpu1 max_slots=x\n", "max_slots: must be a positive integer"),
    ("mpi-user", "alice@gpu1\n", "has a user in it, which a hostfile cannot hold"),
    (
        "mpi-slots-apart",
        "gpu1 slots=2\ngpu2\ngpu03 slots 8\n",
        "3: expected slots=N, got 'slots 8'",
    ),
    ("mpi-horovod", "gpu1:4\n", "Horovod's HOST:SLOTS form; write gpu1 slots=4"),
    ("mpi-bom-typo", "\ufeffgpu1 slots=2\ngpu2 slots= 4\n", "2: expected slots=N, got 'slots= 4'"),
    ("mpi-comma-subshell", "gpu1,pxn$(id) slots=1\n", "contains '$'"),
    ("mpi-world", "gpu[1-65] slots=1024\n", "a job has at most 65,536 ranks"),
    # Each reached the preflight ("cannot resolve 'node1:'") or planned a master "node1:x".
    ("mpi-stray-colon", "node0 slots=1\nnode1:\n", "bad.yaml:2: 'node1:' is no host name"),
    ("mpi-yaml-line", "node0 slots=2\nhosts:\n", "bad.yaml:2: 'hosts:' is no host name"),
    ("mpi-horovod-range", "node[0-1]:2\n", "write node[0-1] slots=2"),
    ("yaml-stray-colon", entry("node1:x"), "'node1:x' contains ':' but is no IPv6 address"),
    ("yaml-no-space", "master_port:auto\nhosts:\n  - host: a\n", "write master_port: auto"),
]

HEAVY = {"alias-bomb", "deep-5000", "range-billion", "range-million", "gpus-trillion"}
HEAVY |= {"many-values", "mpi-range-billion", "mpi-many-lines", "gpus-huge-int"}
HEAVY |= {"range-operator-flood"}
CASES = [*HOST_NAMES, *RANGES, *FIELDS, *YAML, *MPI]
FILES = [
    ("dev-zero", "/dev/zero", "larger than 1,048,576 bytes (1 MiB)"),
    ("too-large", "big.yaml", "big.yaml: larger than 1,048,576 bytes"),
    ("directory", "a-directory", "a-directory: cannot read it: Is a directory"),
    ("missing", "missing.yaml", "missing.yaml: no such file"),
    ("not-utf8", "latin1.yaml", "latin1.yaml:2: not UTF-8 text (byte 0xe9)"),
    # A name's newline split the error in two lines; its escape drove the terminal.
    ("newline-name", "bad\nname.yaml", "bad\\nname.yaml:2: hosts[0].gpus: must be auto or"),
    ("escape-name", "no\x1b[31mred.yaml", "no\\x1b[31mred.yaml: no such file"),
]


def _write_special_files(box: Sandbox) -> None:
    (box.root / "big.yaml").write_text(entry("a") + "#" * (1 << 20))
    (box.root / "latin1.yaml").write_bytes(b"hosts:\n  - {host: caf\xe9, gpus: 1}\n")
    (box.root / "bad\nname.yaml").write_text("hosts:\n  - {host: node0, gpus: x}\n")


@pytest.mark.parametrize(
    ("text", "fragment"),
    # The heavy ones run in a process of their own, measured: see below.
    [pytest.param(t, f, id=name) for name, t, f in CASES if name not in HEAVY],
)
def test_bad_hosts_file(
    sandbox: Sandbox,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    text: str,
    fragment: str,
) -> None:
    (sandbox.root / "bad.yaml").write_text(sandbox.fill(text))
    for command in (["run", "bad.yaml", "train.py"], ["kill", "bad.yaml", "job1"]):
        assert_refused(sandbox, command, capsys, sandbox.fill(fragment))


@pytest.mark.parametrize(
    ("path", "fragment"), [pytest.param(p, f, id=name) for name, p, f in FILES]
)
def test_unreadable_hosts_file(
    sandbox: Sandbox,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    path: str,
    fragment: str,
) -> None:
    _write_special_files(sandbox)
    assert_refused(sandbox, ["run", path, "train.py"], capsys, fragment)


RUN, KILL = ["run", "bad.yaml", "train.py"], ["kill", "bad.yaml", "job1"]


@pytest.mark.parametrize(
    ("argv", "text", "fragment"),
    [
        *[pytest.param(RUN, t, f, id=n) for n, t, f in CASES if n in HEAVY],
        *[pytest.param(KILL, t, f, id=f"{n}-kill") for n, t, f in CASES if n in HEAVY],
        pytest.param(["run", "/dev/zero", "train.py"], "", "larger than 1,048,576", id="dev-zero"),
        pytest.param(
            ["run", "--ranks", "0-99999999999", "hosts.yaml", "train.py"],
            "",
            "--ranks '0-99999999999'",
            id="ranks-huge",
        ),
    ],
)
def test_heavy_cases_stay_small_in_a_process_of_their_own(
    sandbox: Sandbox,  # noqa: F811
    argv: list[str],
    text: str,
    fragment: str,
) -> None:
    (sandbox.root / "bad.yaml").write_text(sandbox.fill(text))
    dialed_before = len(sandbox.trap.dialed)
    result = run_measured(sandbox, argv)
    lines = result.stderr.splitlines()
    assert (result.code, result.stdout) == (2, ""), result.stderr
    assert len(lines) == 1 and lines[0].startswith("clusterlaunch: error: "), result.stderr
    assert fragment in lines[0]
    assert result.cpu_seconds < MAX_SECONDS, f"{result.cpu_seconds:.2f} s of CPU"
    assert result.added_rss_mb < MAX_RSS_MB, f"{result.added_rss_mb:.0f} MB"
    assert len(sandbox.trap.dialed) == dialed_before
    assert not list(sandbox.marks.iterdir()), "a ProxyCommand (or an injected command) ran"


def test_the_table_is_big_enough() -> None:
    assert len(CASES) + len(FILES) >= 100
    assert len({name for name, _, _ in CASES}) == len(CASES)
