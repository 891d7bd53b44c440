"""Text the user names in a hosts file stays the text they wrote.

YAML 1.1 reads an unquoted ``yes``, ``on``, ``No``, ``~``, ``null`` or ``.inf`` as
True, None or inf. A mapping key names something (a field, a variable), so it is
kept as written; a value where text is wanted is refused, showing what was written.
"""

from __future__ import annotations

import shlex
import textwrap

import pytest

from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostfile import parse_inventory
from clusterlaunch.core.model import Inventory, LaunchOptions, SshTarget
from clusterlaunch.core.planner import plan_job

HOST = "hosts:\n  - host: gpu-a\n    gpus: 1\n"


def parse(text: str) -> Inventory:
    return parse_inventory(textwrap.dedent(text), "hosts.yaml")


def refusal(text: str) -> str:
    with pytest.raises(HostsFileError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("key", ["yes", "on", "No", "null", "NULL", "true", "Off", "y", "n"])
def test_an_env_key_yaml_reads_as_a_bool_or_null_keeps_its_text(key: str) -> None:
    assert parse(HOST + f"    env: {{{key}: v}}\n").hosts[0].env == {key: "v"}


@pytest.mark.parametrize("key", ["~", ".inf", "-.Inf", ".NaN", "1e3", "1.0e+3", "0x10", "1.5"])
def test_an_env_key_that_is_no_variable_name_is_refused_as_written(key: str) -> None:
    message = refusal(HOST + f"    env: {{{key}: v}}\n")
    assert message == (
        f"hosts.yaml:4: hosts[0].env.{key}: {key!r} is not a valid variable name "
        "(letters, digits and _; not starting with a digit)"
    )


def test_keys_that_differ_in_case_are_two_variables_not_a_duplicate() -> None:
    env = parse(HOST + "    env: {Null: x, NULL: y, null: z}\n").hosts[0].env
    assert env == {"Null": "x", "NULL": "y", "null": "z"}


def test_a_key_written_twice_is_still_named_as_written() -> None:
    assert refusal(HOST + "    env: {yes: x, 'yes': y}\n") == (
        "hosts.yaml:4: yes: duplicate key 'yes' (first at line 4); keep one of them"
    )


def test_defaults_and_host_env_merge_on_the_written_key() -> None:
    text = "defaults:\n  env: {on: d, yes: d}\n" + HOST + "    env: {yes: h}\n"
    assert parse(text).hosts[0].env == {"on": "d", "yes": "h"}


def test_yes_and_on_reach_the_remote_command_as_written() -> None:
    inventory = parse(HOST + "    env: {yes: '1', on: two words, Null: x}\n")
    job = plan_job(
        inventory,
        [SshTarget("gpu-a", "10.0.0.1")],
        LaunchOptions(script="train.py"),
        job_id="j1",
        local_env={},
        local_cwd="/w",
        agent_size=1,
    )
    words = shlex.split(job.nodes[0].command)
    start = words.index("export") + 1
    assert words[start : start + 3] == ["__cl_yes=1", "__cl_on=two words", "__cl_Null=x"]
    assert not any(word.startswith(("__cl_True=", "__cl_None=")) for word in words)


def test_a_nul_in_a_quoted_key_is_still_refused() -> None:
    assert refusal(HOST + '    env: {"A\\0B": x}\n').startswith(
        "hosts.yaml:4: YAML value error: a NUL or a lone surrogate"
    )


@pytest.mark.parametrize(
    ("text", "where", "got"),
    [
        ("hosts:\n  - host: yes\n    gpus: 1\n", "2: hosts[0].host: must be a host name", "yes"),
        ("hosts:\n  - host: null\n    gpus: 1\n", "2: hosts[0].host: must be a host name", "null"),
        ("hosts:\n  - host: .inf\n    gpus: 1\n", "2: hosts[0].host: must be a host name", ".inf"),
        (HOST + "    env: {A: on}\n", "4: hosts[0].env.A: must be a string", "on"),
        (HOST + "    env: {A: ~}\n", "4: hosts[0].env.A: must be a string", "~"),
        (HOST + "    user: No\n", "4: hosts[0].user: must be a non-empty string", "No"),
        (HOST + "    setup: off\n", "4: hosts[0].setup: must be a non-empty string", "off"),
        ("master_addr: ON\n" + HOST, "1: master_addr: must be a non-empty string", "ON"),
    ],
)
def test_a_text_value_yaml_reads_as_something_else_is_refused_as_written(
    text: str, where: str, got: str
) -> None:
    message = refusal(text)
    assert message.startswith(f"hosts.yaml:{where}, got {got}, which YAML reads as ")
    assert message.endswith(f'; write it in quotes ("{got}")')


def test_a_number_where_text_is_wanted_is_shown_once() -> None:
    assert refusal(HOST + "    user: 1.5\n") == (
        "hosts.yaml:4: hosts[0].user: must be a non-empty string, got 1.5; "
        'write it in quotes ("1.5")'
    )
    # A variable's value may be a secret: what YAML made of it is said, the value never.
    assert refusal(HOST + "    env: {A: 1.5}\n") == (
        "hosts.yaml:4: hosts[0].env.A: must be a string, and YAML reads this value as a number "
        "with a fraction or exponent (not shown); write it in quotes"
    )


@pytest.mark.parametrize("name", ["yes", "null", "1e3", ".inf", "0x10"])
def test_a_quoted_host_name_is_the_text_in_quotes(name: str) -> None:
    assert parse(f"hosts:\n  - host: '{name}'\n    gpus: 1\n").hosts[0].host == name


def test_a_merged_value_overridden_by_a_written_one_is_shown_as_the_written_one() -> None:
    text = "hosts:\n  - gpus: 1\n    <<: {host: yes}\n    host: [b]\n"
    assert refusal(text) == "hosts.yaml:4: hosts[0].host: must be a host name, got ['b']"


@pytest.mark.parametrize(
    ("text", "field", "unset"),
    [
        (HOST + "    devices: ~\n", "devices", None),
        (HOST + "    devices: null\n", "devices", None),
        (HOST + "    port: ~\n", "port", None),
        ("defaults: {port: ~}\n" + HOST, "port", None),
        (HOST + "    accelerator: ~\n", "accelerator", None),
        (HOST + "    spare: ~\n  - {host: b, gpus: 1}\n", "spare", False),
    ],
)
def test_an_optional_host_field_written_as_null_is_unset(
    text: str, field: str, unset: object
) -> None:
    """hosts-file.md: "An optional field written as YAML's null is unset" (devices: ~ was
    refused with "got None")."""
    assert getattr(parse(text).hosts[0], field) == unset


@pytest.mark.parametrize(
    ("text", "field"), [("master_port: ~\n", "master_port"), ("ssh_client: ~\n", "ssh_client")]
)
def test_an_optional_top_level_field_written_as_null_is_unset(text: str, field: str) -> None:
    assert getattr(parse(text + HOST), field) is None
    assert parse("max_restarts: null\n" + HOST).max_restarts is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "hosts:\n  - host: a\n    gpus: ~\n",
            "hosts.yaml:3: hosts[0].gpus: must be auto or a positive integer up to 1,024, "
            "got ~, which YAML reads as no value",
        ),
        (
            HOST + "    env: {A: null}\n",
            "hosts.yaml:4: hosts[0].env.A: must be a string, got null, which YAML reads as "
            'no value; write it in quotes ("null")',
        ),
    ],
)
def test_a_null_where_a_value_is_needed_is_never_shown_as_none(text: str, message: str) -> None:
    assert refusal(text) == message


@pytest.mark.parametrize(("value", "shown"), [("1", "1"), ('"1"', "'1'"), ("yes", "yes")])
def test_an_unknown_accelerator_is_answered_with_the_known_ones(value: str, shown: str) -> None:
    """``accelerator: 1`` said to quote it, and "1" was then refused for not being one."""
    assert refusal(HOST + f"    accelerator: {value}\n") == (
        f"hosts.yaml:4: hosts[0].accelerator: must be one of cuda, rocm, npu, got {shown}"
    )
