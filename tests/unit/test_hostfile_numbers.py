"""Numbers YAML would rewrite (0755, 0x1F, 1:30:00, 1_000, 08) and an empty devices: list.

Each case writes a real hosts file under tmp_path and reads it through the real
loader, so the line numbers, field names and messages are the ones a user sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusterlaunch.cli import main as cli
from clusterlaunch.core.errors import HostsFileError, UsageError
from clusterlaunch.core.hostfile import load_inventory
from clusterlaunch.core.model import Inventory
from clusterlaunch.core.yamlines import NumberForm, PythonEvents, load_yaml, loader_class

HOST = "hosts:\n  - host: localhost\n    gpus: 1\n"


def load(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "hosts.yaml"
    path.write_text(text)
    return load_inventory(str(path))


def refusal(tmp_path: Path, text: str) -> str:
    """The one-line message for ``text``, without the directory part of the path."""
    with pytest.raises(HostsFileError) as info:
        load(tmp_path, text)
    assert isinstance(info.value, UsageError)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix(f"{tmp_path}/")


def fix(text: str, number: int) -> str:
    return f'quote it ("{text}") if it is text, or write the number in decimal ({number})'


@pytest.mark.parametrize(
    ("value", "number"),
    [
        ("0755", 493),
        ("0x1F", 31),
        ("0b101", 5),
        ("1:30:00", 5400),
        ("1_000", 1000),
        ("+5", 5),
        ("-0", 0),
        ("-0x10", -16),
        ("00", 0),
    ],
)
def test_yaml_11_integer_forms_in_text_are_refused(tmp_path: Path, value: str, number: int) -> None:
    message = refusal(tmp_path, HOST + f"    workdir: {value}\n")
    assert message == (
        f"hosts.yaml:4: hosts[0].workdir: {value} is not a plain decimal integer: "
        f"YAML reads it as {number}; {fix(value, number)}"
    )
    # A variable's value may be a secret: named, never shown (nor what YAML makes of it).
    message = refusal(tmp_path, HOST + f"    env: {{OK: 1, A: {value}}}\n")
    assert message == (
        "hosts.yaml:4: hosts[0].env.A: is not a plain decimal integer (YAML reads it as a "
        "number in another base or form; the value is not shown): quote it if it is text, or "
        "write the number in decimal"
    )


@pytest.mark.parametrize(("value", "number"), [("08", 8), ("09", 9), ("0o17", 15), ("-08", -8)])
def test_numbers_yaml_11_keeps_as_text_are_refused_too(
    tmp_path: Path, value: str, number: int
) -> None:
    # YAML 1.1 keeps 08 as "08" but refuses 07 as octal; one rule for both.
    message = refusal(tmp_path, HOST + f"    workdir: {value}\n")
    assert message == (
        f"hosts.yaml:4: hosts[0].workdir: {value} is not a plain decimal integer: "
        f"YAML 1.2 reads it as {number}; {fix(value, number)}"
    )
    message = refusal(tmp_path, HOST + f"    env:\n      A: {value}\n")
    assert message.startswith("hosts.yaml:5: hosts[0].env.A: is not a plain decimal integer (")
    assert f" {value} " not in message and f"as {number}" not in message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("hosts:\n  - host: localhost\n    gpus: 010\n", "hosts.yaml:3: hosts[0].gpus"),
        ("defaults:\n  gpus: 0x10\nhosts:\n  - host: localhost\n", "hosts.yaml:2: defaults.gpus"),
        (HOST + "    port: 0x16\n", "hosts.yaml:4: hosts[0].port"),
        ("master_port: 29_500\n" + HOST, "hosts.yaml:1: master_port"),
        ("max_restarts: 0b1\n" + HOST, "hosts.yaml:1: max_restarts"),
        (HOST.replace("gpus: 1", "gpus: 2") + "    devices: [0, 0x1]\n", "hosts.yaml:4: "),
        ("defaults:\n  workdir: 1:30\n" + HOST, "hosts.yaml:2: defaults.workdir"),
    ],
)
def test_every_integer_field_refuses_them(tmp_path: Path, text: str, where: str) -> None:
    message = refusal(tmp_path, text)
    assert message.startswith(where), message
    assert "is not a plain decimal integer: YAML reads it as" in message
    assert message.endswith(")") and "write the number in decimal (" in message


def test_a_device_index_names_its_place_in_the_list(tmp_path: Path) -> None:
    text = HOST.replace("gpus: 1", "gpus: 2") + "    devices: [0, 0x1]\n"
    assert refusal(tmp_path, text) == (
        "hosts.yaml:4: hosts[0].devices[1]: 0x1 is not a plain decimal integer: "
        f"YAML reads it as 1; {fix('0x1', 1)}"
    )


def test_gpus_010_is_refused_rather_than_eight_processes(tmp_path: Path) -> None:
    assert refusal(tmp_path, "hosts:\n  - host: localhost\n    gpus: 010\n") == (
        "hosts.yaml:3: hosts[0].gpus: 010 is not a plain decimal integer: "
        f"YAML reads it as 8; {fix('010', 8)}"
    )


def test_plain_decimals_and_quoted_strings_pass_unchanged(tmp_path: Path) -> None:
    text = (
        "master_port: 29500\nmax_restarts: 0\nhosts:\n  - host: localhost\n    gpus: 2\n"
        "    port: 22\n    devices: [0, 1]\n"
        "    env: {Z: 0, N: -5, BIG: 12345678901234567890, Q: \"0755\", S: '08', "
        'T: "1:30:00", H: "0x1F", U: "1_000", O: "0o17"}\n'
    )
    spec = load(tmp_path, text).hosts[0]
    assert spec.gpus == 2 and spec.port == 22 and spec.devices == (0, 1)
    assert spec.env == {
        "Z": "0",
        "N": "-5",
        "BIG": "12345678901234567890",
        "Q": "0755",
        "S": "08",
        "T": "1:30:00",
        "H": "0x1F",
        "U": "1_000",
        "O": "0o17",
    }


def test_a_quoted_digit_string_is_read_in_decimal_where_a_number_is_wanted(
    tmp_path: Path,
) -> None:
    assert load(tmp_path, 'hosts:\n  - host: localhost\n    gpus: "08"\n').hosts[0].gpus == 8


def test_text_that_only_starts_like_a_number_is_text(tmp_path: Path) -> None:
    env = load(tmp_path, HOST + "    env: {A: 0755abc, B: 0x, C: 1:2:3:x, D: 08.5.1}\n")
    assert env.hosts[0].env == {"A": "0755abc", "B": "0x", "C": "1:2:3:x", "D": "08.5.1"}


def test_a_key_keeps_the_text_it_was_written_as(tmp_path: Path) -> None:
    # Not 493: the variable-name rule then explains what is wrong with it.
    message = refusal(tmp_path, HOST + "    env: {0755: x}\n")
    assert message.startswith("hosts.yaml:4: hosts[0].env.0755: '0755' is not a valid variable")


def test_a_huge_number_is_cut_short_in_the_message(tmp_path: Path) -> None:
    message = refusal(tmp_path, HOST + f"    workdir: 0x{'f' * 5000}\n")
    assert message == (
        "hosts.yaml:4: hosts[0].workdir: 0xfffffffffffffffffffffffff... is not a plain decimal "
        'integer; quote it ("0xfffffffffffffffffffffffff...") if it is text, '
        "or write the number in decimal"
    )


def test_a_number_in_an_anchor_is_reported_where_it_is_written(tmp_path: Path) -> None:
    text = "defaults: &d\n  workdir: 0755\nhosts:\n  - host: localhost\n    gpus: 1\n    <<: *d\n"
    assert refusal(tmp_path, text).startswith("hosts.yaml:2: defaults.workdir: 0755 is not")
    text = "defaults: &d\n  env: {A: 0755}\nhosts:\n  - host: localhost\n    gpus: 1\n    <<: *d\n"
    assert refusal(tmp_path, text).startswith("hosts.yaml:2: defaults.env.A: is not a plain")


@pytest.mark.parametrize("source", [PythonEvents, None])
def test_both_event_sources_make_the_same_number_forms(source: type | None) -> None:
    text = "a: 0755\nb: 08\nc: '0755'\nd: 12\n"
    data = load_yaml(text) if source is None else yaml.load(text, Loader=loader_class(source))
    assert data == {
        "a": NumberForm("0755", 1, 493),
        "b": NumberForm("08", 2, 8, "YAML 1.2"),
        "c": "0755",
        "d": 12,
    }


@pytest.mark.parametrize("source", [PythonEvents, None])
def test_a_value_tagged_as_text_is_that_text(source: type | None) -> None:
    """``!!str 0755`` (or the non-specific ``! 0755``) asks for the text, which every YAML
    reader gives; it was refused as "YAML 1.2 reads it as 755". ``!!int 0755`` is still a
    number YAML changes."""
    text = "a: !!str 0755\nb: !!str 08\nc: ! 0o17\nd: &x !!str 0x1F\ne: *x\nf: !!int 0755\n"
    data = load_yaml(text) if source is None else yaml.load(text, Loader=loader_class(source))
    assert data == {
        "a": "0755",
        "b": "08",
        "c": "0o17",
        "d": "0x1F",
        "e": "0x1F",
        "f": NumberForm("0755", 6, 493),
    }


def test_an_env_value_tagged_as_text_reaches_the_job_as_written(tmp_path: Path) -> None:
    spec = load(tmp_path, HOST + "    env: {A: !!str 0755, B: !!str 08}\n").hosts[0]
    assert spec.env == {"A": "0755", "B": "08"}


@pytest.mark.parametrize("gpus", ["auto", "1", "2"])
def test_an_empty_devices_list_is_refused_whatever_gpus_says(tmp_path: Path, gpus: str) -> None:
    text = f"hosts:\n  - host: localhost\n    gpus: {gpus}\n    devices: []\n"
    assert refusal(tmp_path, text) == (
        "hosts.yaml:4: hosts[0].devices: is empty; list the device indices "
        "(devices: [0, 1]) or drop the key to use every device"
    )


def test_gpus_zero_is_refused(tmp_path: Path) -> None:
    assert refusal(tmp_path, "hosts:\n  - host: localhost\n    gpus: 0\n") == (
        "hosts.yaml:3: hosts[0].gpus: must be auto or a positive integer up to 1,024, got 0"
    )


@pytest.mark.parametrize(
    ("text", "flags", "expected"),
    [
        (
            "hosts:\n  - host: localhost\n    gpus: auto\n    devices: []\n",
            [],
            "hosts.yaml:4: hosts[0].devices: is empty; list the device indices",
        ),
        (HOST + "    env: {A: 0755}\n", [], "hosts.yaml:4: hosts[0].env.A: is not a plain"),
        (HOST, ["--gpus-per-host", "0"], "--gpus-per-host '0': use a whole number"),
    ],
)
def test_the_cli_says_one_line_and_exits_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    flags: list[str],
    expected: str,
) -> None:
    (tmp_path / "hosts.yaml").write_text(text)
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "--dry-run", *flags, "hosts.yaml", "train.py"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"clusterlaunch: error: {expected}"), captured.err
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.out == ""  # no plan: nothing would start
