"""An error about a variable names it, and never prints its value (it may be a secret).

The hostile tester's ``export SECRET_TOK=$'ghp_...\\xff'`` with ``--forward-env '*'``
printed the whole token, escaped, so that a CI log's masking of the raw bytes missed
it. The size limits' messages already named the variable only (``BIG=... (name and
value) is ...``); now every message about a variable's value does. Each case exits 2 in
one line, before any host is contacted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.cli.main import main

SECRET = "ghp_VeryLongSecretTokenValue1234567890abcdef"


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert SECRET not in err and SECRET[:8] not in err, err
    return err


@pytest.mark.parametrize("command", [["check"], ["run", "--dry-run"], ["run"]])
def test_a_forwarded_variable_that_is_not_utf8_is_named_not_shown(
    far_work: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    monkeypatch.setenv("SECRET_TOK", SECRET + "\udcff")  # the byte 0xff, as Python reads it
    script = ["train.py"] if command[0] == "run" else []
    err = _refused([*command, "--forward-env", "*", "far.yaml", *script], capsys)
    assert err == (
        "clusterlaunch: error: --forward-env: $SECRET_TOK: its value is not valid UTF-8 (the "
        "value is not shown); hosts receive text, so set it in UTF-8\n"
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (f"TOK={SECRET}\udcff", "--env TOK=...: its value is not valid UTF-8 (the value is not"),
        (f"RANK={SECRET}", "--env RANK=...: RANK is set by torchrun for every worker"),
        (f"1TOK={SECRET}", "--env '1TOK'=...: '1TOK' is not a valid variable name"),
        (SECRET, "--env: expected KEY=VALUE, e.g. --env NCCL_DEBUG=INFO; got a word without"),
    ],
    ids=["not-utf8", "refused-name", "invalid-name", "no-equals"],
)
def test_an_env_flag_shows_its_name_only(
    far_work: Path, capsys: pytest.CaptureFixture[str], env: str, said: str
) -> None:
    err = _refused(["run", "--env", env, "far.yaml", "train.py"], capsys)
    assert err.startswith(f"clusterlaunch: error: {said}"), err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # A value over two lines (a PEM key): the second line is a value's, with no '='.
        (f'KEY="-----BEGIN\n{SECRET}\n', "v.env:2: expected KEY=VALUE, got a line without '='"),
        (f"={SECRET}\n", "v.env:1: expected KEY=VALUE, got no name before '='"),
        (f"RANK={SECRET}\n", "v.env:1: RANK: RANK is set by torchrun for every worker"),
    ],
)
def test_an_env_file_error_shows_the_line_number_not_the_line(
    far_work: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    (far_work / "v.env").write_text(text)
    err = _refused(["run", "--env-file", "v.env", "far.yaml", "train.py"], capsys)
    assert err == f"clusterlaunch: error: {said}\n"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("1234567.5", "must be a string, and YAML reads this value as a number with a fraction"),
        ("2024-01-01", "must be a string, and YAML reads this value as a date (not shown)"),
        ("[a, b]", "must be a string, and YAML reads this value as a list (not shown)"),
        ("0x1234abcd", "is not a plain decimal integer (YAML reads it as a number in another"),
        ("0123456", "is not a plain decimal integer (YAML reads it as a number in another base"),
    ],
)
def test_a_hosts_file_value_yaml_misread_is_named_not_shown(
    far_work: Path, capsys: pytest.CaptureFixture[str], value: str, said: str
) -> None:
    (far_work / "h.yaml").write_text(
        f"hosts:\n  - host: unreachable.invalid\n    gpus: 1\n    env:\n      PIN: {value}\n"
    )
    err = _refused(["run", "h.yaml", "train.py"], capsys)
    assert err.startswith(f"clusterlaunch: error: h.yaml:5: hosts[0].env.PIN: {said}"), err
    assert value not in err and value.strip("[]0x") not in err, err
