"""MPI/DeepSpeed hostfiles read as their own format: errors name the file, the line, the token.

The first cases are DeepSpeed's own hostfile tests (tests/unit/launcher/test_run.py,
``test_hostfile_good`` and ``test_hostfiles_bad``), run through clusterlaunch's parser.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostfile import load_inventory, parse_inventory
from clusterlaunch.core.model import HostSpec

DEEPSPEED_GOOD = """
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    """


def hosts_of(text: str, path: str = "t.txt") -> list[tuple[str, int | None]]:
    return [(spec.host, spec.gpus) for spec in parse_inventory(text, path).hosts]


def error_of(text: str, path: str = "t.txt") -> str:
    with pytest.raises(HostsFileError) as info:
        parse_inventory(text, path)
    return str(info.value)


def test_deepspeed_good_hostfile() -> None:
    assert hosts_of(DEEPSPEED_GOOD) == [
        ("worker-1", 2),
        ("worker-2", 2),
        ("localhost", 1),
        ("123.23.12.10", 2),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "\n    worker-1 slots=2\n    worker-2 slots=1\n    worker-1 slots=1\n    ",
            "t.txt:4: host: worker-1 is listed twice (also at line 2)",
            id="duplicate-host",
        ),
        pytest.param(
            "\n    this is bad slots=1\n    ",
            "t.txt:2: expected KEY=VALUE such as slots=N, got 'is'",
            id="incorrect-whitespace",
        ),
        pytest.param("\n    \n    ", "t.txt: hosts: the file is empty", id="empty"),
        pytest.param(
            "\n    worker-1 slots=2\n    this is bad slots=1\n    worker-2 slots=4\n"
            "    missingslots\n",
            "t.txt:3: expected KEY=VALUE such as slots=N, got 'is'",
            id="mix-of-good-and-bad",
        ),
    ],
)
def test_deepspeed_bad_hostfiles(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


def test_a_line_without_slots_is_one_slot_as_in_open_mpi() -> None:
    # DeepSpeed's test_hostfiles_bad refuses "missingslots"; Open MPI (and clusterlaunch,
    # as docs/hosts-file.md says) gives such a line one slot.
    assert hosts_of("missingslots\n") == [("missingslots", 1)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "gpu01 slots=8\ngpu02 slots=8\ngpu03 slots 8\n",
            "t.txt:3: expected slots=N, got 'slots 8'",
        ),
        ("gpu03 slots = 8\n", "t.txt:1: expected slots=N, got 'slots = 8'"),
        ("gpu03 slots= 8\n", "t.txt:1: expected slots=N, got 'slots= 8'"),
        ("gpu03 slots\n", "t.txt:1: expected slots=N, got 'slots'"),
        ("gpu03 slot 8\n", "t.txt:1: expected slots=N, got 'slot 8'"),
        ("gpu03 =8\n", "t.txt:1: expected KEY=VALUE such as slots=N, got '=8'"),
        ("gpu01 slots=2 slots=3\n", "t.txt:1: slots= is given twice; keep one"),
        ("gpu01 max_slots=2 max_slots=3\n", "t.txt:1: max_slots= is given twice; keep one"),
        ("gpu01 slot=2\n", "t.txt:1: unknown option 'slot' (did you mean 'slots'?)"),
        ("gpu1:4\n", "t.txt:1: 'gpu1:4' is Horovod's HOST:SLOTS form; write gpu1 slots=4"),
        (
            "node0:22222 slots=1\n",
            "t.txt:1: 'node0:22222': 22222 is past the 1,024 slots a host may have, so a port, "
            "which a hostfile cannot hold; write node0 here and set the port in your SSH config "
            "(Host node0 / Port 22222), or use a YAML hosts file (host: node0, port: 22222)",
        ),
        ("node0:" + "9" * 5000 + "\n", "t.txt:1: 'node0:999999999"),
        ("\ufeffgpu1 slots=2\ngpu2 slots 3\n", "t.txt:2: expected slots=N, got 'slots 3'"),
        ("gpu1\ngpu[1-2]!gpu[1-2] slots=2\n", "t.txt:2: 'gpu[1-2]!gpu[1-2]' stands for no host"),
        ("gpu1,@all\n", "t.txt:1: 'gpu1,@all': '@all' is a ClusterShell group"),
        # A range in Horovod's form got the YAML advice "write host: 'node0' and port: 2".
        ("node[0-1]:2\n", "t.txt:1: 'node[0-1]:2' is Horovod's HOST:SLOTS form; write node[0-1] "),
        # A stray ':' passed, and the preflight could not resolve 'node1:' after connecting.
        ("node0 slots=1\nnode1:\n", "t.txt:2: 'node1:' is no host name (a ':' outside an IPv6"),
        ("node0 slots=1\nnode1:x\n", "t.txt:2: 'node1:x' is no host name"),
        ("node0 slots=1\nnode[1-2]:x\n", "t.txt:2: 'node1:x' contains ':' but is no IPv6"),
        # A YAML line in a hostfile was a host named "hosts:".
        ("node0 slots=2\nhosts:\n", "t.txt:2: 'hosts:' is no host name (a ':' outside an IPv6"),
    ],
)
def test_errors_name_file_line_and_token(text: str, message: str) -> None:
    assert error_of(text).startswith(message), error_of(text)


def test_a_user_in_a_hostfile_gets_advice_a_hostfile_can_follow() -> None:
    message = error_of("gpu0 slots=1\nalice@gpu1 slots=2\n")
    assert message == (
        "t.txt:2: 'alice@gpu1' has a user in it, which a hostfile cannot hold; write 'gpu1' "
        "here and set the user in your SSH config (Host gpu1 / User alice), or use a YAML "
        "hosts file (user: alice)"
    )
    assert "host: gpu1 and user:" not in message  # the YAML advice, unwritable here


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Read as a hostfile: "29500 is past the 1,024 slots ... set the port in your SSH config".
        ("master_port:29500\nhosts:\n  - {host: a, gpus: 1}\n", "1: 'master_port:29500'"),
        # Read as a hostfile: "expected KEY=VALUE such as slots=N, got 'host:'" on line 3.
        ("master_port:auto\nhosts:\n  - host: a\n    gpus: 1\n", "1: 'master_port:auto'"),
        # YAML errors at the next line, or hosts[0] "must be a mapping ..., got 'host:a'".
        ("hosts:\n  - {host: a, gpus: 1}\nmaster_port:29500\n", "3: 'master_port:29500'"),
        ("hosts:\n  - host: a\n    gpus:2\n", "3: 'gpus:2'"),
        ("hosts:\n  - host:a\n", "2: '- host:a'"),
    ],
)
def test_a_yaml_key_without_its_space_gets_that_advice(text: str, message: str) -> None:
    key, value = message.split("'")[1].removeprefix("- ").split(":")
    assert error_of(text, "h.yaml") == (
        f"h.yaml:{message}: YAML needs a space after the ':' of a key; write {key}: {value}"
    )


def test_a_key_like_word_elsewhere_is_left_alone() -> None:
    """Inside setup's block, or a hostfile's own host: the advice is only for a file
    that fails to read, and only for a line that is a hosts-file key and one word."""
    text = "hosts:\n  - host: a\n    gpus: 1\n    setup: |\n      env:X=1\n"
    assert hosts_of(text, "h.yaml") == [("a", 1)]
    assert "port: 22222" in error_of("node0:22222 slots=1\n")


def test_bom_and_ipv6() -> None:
    text = "\ufeff# cluster\nfe80::1%eth0 slots=2\n2001:db8::7\n10.0.0.7 slots=4\n"
    assert hosts_of(text) == [("fe80::1%eth0", 2), ("2001:db8::7", 1), ("10.0.0.7", 4)]


def test_bom_in_yaml_too() -> None:
    assert hosts_of("\ufeffhosts:\n  - {host: a, gpus: 3}\n", "h.yaml") == [("a", 3)]


def test_node_set_expressions_on_a_line() -> None:
    assert hosts_of("gpu[1-4]!gpu2 slots=2\nnode0,node1\n") == [
        ("gpu1", 2),
        ("gpu3", 2),
        ("gpu4", 2),
        ("node0", 1),
        ("node1", 1),
    ]


def test_line_numbers_of_expanded_hosts(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(
        textwrap.dedent("""\
        # two racks
        rack[1-2] slots=8
        """)
    )
    assert load_inventory(str(path)).hosts == (
        HostSpec(host="rack1", gpus=8, line=2),
        HostSpec(host="rack2", gpus=8, line=2),
    )


def test_the_cli_says_it_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("gpu01 slots=8\ngpu02 slots=8\ngpu03 slots 8\n")
    assert main(["run", "--dry-run", "t.txt", "train.py"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "clusterlaunch: error: t.txt:3: expected slots=N, got 'slots 8'\n"
    assert captured.out == ""


# Characters str.splitlines() ends a line at, though Open MPI's lexer does not.
NOT_NEWLINES = ["\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("char", NOT_NEWLINES, ids=[f"U+{ord(c):04X}" for c in NOT_NEWLINES])
def test_one_line_is_never_two_hosts(char: str) -> None:
    with pytest.raises(HostsFileError) as info:
        parse_inventory(f"gpu0 slots=1\ngpu1{char}gpu2 slots=2\n", "t.txt")
    assert str(info.value) == (
        f"t.txt:2: {f'gpu1{char}gpu2'!r} contains {char!r}, which OpenSSH refuses in a host name"
    )


@pytest.mark.parametrize("char", ["\f", "\v"])
def test_form_feed_and_vertical_tab_separate_words_as_in_open_mpi(char: str) -> None:
    inventory = parse_inventory(f"gpu1{char}slots=2{char}\ngpu2\n", "t.txt")
    assert [(h.host, h.gpus, h.line) for h in inventory.hosts] == [("gpu1", 2, 1), ("gpu2", 1, 2)]


def test_line_numbers_count_newlines_only() -> None:
    with pytest.raises(HostsFileError) as info:
        parse_inventory("gpu1 slots=1\u2028\r\ngpu2 slot=2\n", "t.txt")
    assert (
        str(info.value) == "t.txt:1: slots: must be a positive integer up to 1,024, got '1\\u2028'"
    )


def test_a_crlf_hostfile_reads_like_an_lf_one() -> None:
    inventory = parse_inventory("gpu1 slots=2\r\n# c\r\ngpu2\r\n", "t.txt")
    assert [(h.host, h.gpus, h.line) for h in inventory.hosts] == [("gpu1", 2, 1), ("gpu2", 1, 3)]
