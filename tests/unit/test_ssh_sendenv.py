"""SendEnv and SetEnv read as ssh reads them (``ssh -G`` is the ground truth), and the
variables a session is sent from them (clientloop.c: SendEnv's matches, then SetEnv)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core import envpolicy
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshresolve

CONFIGS = [
    "Host n0\n  SendEnv A_* B\n  SendEnv C\nHost *\n  SendEnv D -B\n",
    'Host *\n  SetEnv X=1 "Y=two words" X=2\n  SetEnv Z=3\nHost n0\n  SetEnv W=4\n',
    'Host n0\n  SetEnv "Q=quoted"\n  SendEnv=LANG  LC_*\n',
    "Host n*\n  SendEnv LC_* -LC_*\n  SendEnv E\nMatch originalhost n0\n  SendEnv F\n",
    "Host other\n  SendEnv G\n  SetEnv H=1\n",
]


def _by_ssh(config: Path) -> tuple[list[str], list[str]]:
    shown = subprocess.run(
        ["ssh", "-G", "-F", str(config), "n0"], capture_output=True, text=True, check=True
    ).stdout
    found = sshresolve.parse_options(shown)
    return found.get("sendenv", []), found.get("setenv", [])


@pytest.mark.parametrize("text", CONFIGS)
def test_sendenv_and_setenv_are_what_ssh_reads(tmp_path: Path, text: str) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    [target] = sshconfig.resolve_targets(str(config), [HostSpec(host="n0", gpus=1)])
    send, set_ = _by_ssh(config)
    assert list(target.send_env) == send
    assert [f"{name}={value}" for name, value in target.set_env] == set_


def test_a_setenv_word_without_a_value_is_one_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host *\n  SetEnv JUSTNAME\n")
    said = r"^SSH config, host n0: SetEnv: use NAME=VALUE; got a word without '='$"
    with pytest.raises(UsageError, match=said):
        sshconfig.resolve_targets(str(config), [HostSpec(host="n0", gpus=1)])
    config.write_text("Host *\n  SetEnv OK=1 =s3cret\n")  # a value: never shown
    with pytest.raises(UsageError, match=r"no name before '='$") as refused:
        sshconfig.resolve_targets(str(config), [HostSpec(host="n0", gpus=1)])
    assert "s3cret" not in str(refused.value)


def test_a_session_is_sent_sendenv_matches_then_setenv() -> None:
    local = {"LANG": "C.UTF-8", "LC_ALL": "C", "L[1]": "bracket", "LX": "x", "NCCL_DEBUG": "1"}
    sent = envpolicy.sent_by_ssh(["LANG", "LC_*", "L[1]", "L?"], [("LANG", "en_GB.UTF-8")], local)
    # "[" is literal in ssh's match_pattern; SetEnv comes later, so the server keeps it.
    assert sent == {"LANG": "en_GB.UTF-8", "LC_ALL": "C", "L[1]": "bracket", "LX": "x"}
    assert envpolicy.sent_by_ssh([], [], local) == {}
