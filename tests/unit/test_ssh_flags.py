"""Yes/no keywords read as ssh reads them (``ssh -G`` is the ground truth).

OpenSSH takes ``yes``, ``true``, ``no`` and ``false`` in any case (readconf.c's
multistate_flag; StrictHostKeyChecking also ``ask``, ``accept-new`` and ``off``)
and refuses a config with any other value. clusterlaunch compared with ``"yes"``:
``IdentitiesOnly true`` offered every key, ``StrictHostKeyChecking true`` accepted
a new host key, and ``IdentitiesOnly maybe`` was read as no.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec, SshTarget
from clusterlaunch.transport import sshconfig, sshresolve, sshtarget
from tests.unit.sshtruth import ssh_g

SPELLINGS = ["yes", "true", "TRUE", "Yes", "no", "false", "False", "NO"]
STRICT_ONLY = ["off", "OFF", "accept-new", "ask"]
SPEC = HostSpec(host="n0", gpus=1)


def _read(target: SshTarget) -> tuple[bool, bool, str]:
    return target.identities_only, target.hash_known_hosts, target.key_policy(None)[0]


def _config(tmp_path: Path, flags: str, strict: str) -> Path:
    config = tmp_path / "config"
    config.write_text(
        f"Host n0\n  IdentitiesOnly {flags}\n  HashKnownHosts {flags}\n"
        f"  StrictHostKeyChecking {strict}\n"
    )
    return config


@pytest.mark.parametrize("value", SPELLINGS)
def test_a_flag_is_read_as_ssh_reads_it(tmp_path: Path, value: str) -> None:
    config = _config(tmp_path, value, value)
    shown = ssh_g(config)
    assert shown.returncode == 0, shown.stderr
    by_ssh = sshtarget.target_from(sshresolve.parse_options(shown.stdout), SPEC)
    [ours] = sshconfig.resolve_targets(str(config), [SPEC])
    assert _read(ours) == _read(by_ssh)
    expected = value.lower() in ("yes", "true")
    assert _read(ours) == (expected, expected, "strict" if expected else "accept-new")


@pytest.mark.parametrize("value", STRICT_ONLY)
def test_strict_host_key_checking_takes_ssh_values(tmp_path: Path, value: str) -> None:
    config = _config(tmp_path, "no", value)
    shown = ssh_g(config)
    assert shown.returncode == 0, shown.stderr
    by_ssh = sshtarget.target_from(sshresolve.parse_options(shown.stdout), SPEC)
    [ours] = sshconfig.resolve_targets(str(config), [SPEC])
    assert ours.key_policy(None) == by_ssh.key_policy(None) or value == "ask"
    # ssh -G prints "ask", its default, when unset too; read from the file it is strict.
    expected = "strict" if value == "ask" else "accept-new"
    assert ours.key_policy(None)[0] == expected


@pytest.mark.parametrize(
    ("flags", "strict", "line", "said"),
    [
        ("maybe", "yes", 2, "IdentitiesOnly 'maybe': ssh refuses this value; use yes or no"),
        ("1", "yes", 2, "IdentitiesOnly '1': ssh refuses this value; use yes or no"),
        ("yes", "none", 4, "StrictHostKeyChecking 'none': ssh refuses this value; use yes,"),
    ],
)
def test_a_value_ssh_refuses_is_one_line_naming_the_line(
    tmp_path: Path, flags: str, strict: str, line: int, said: str
) -> None:
    config = _config(tmp_path, flags, strict)
    shown = ssh_g(config)
    assert shown.returncode == 255 and f"line {line}: unsupported option" in shown.stderr
    with pytest.raises(UsageError) as raised:
        sshconfig.resolve_targets(str(config), [SPEC])
    message = str(raised.value)
    # A yes/no keyword's value is checked in every block (ssh refuses the file): no host.
    where = f"{config}:{line}" + ("" if "use yes or no" in said else ", host n0")
    assert message.startswith(f"{where}: {said}"), message
    assert "\n" not in message


@pytest.mark.parametrize("value", ["30", "1m", "1m30s", "90S", "1h", "0"])
def test_connect_timeout_is_read_as_ssh_reads_a_time(tmp_path: Path, value: str) -> None:
    """readconf's convtime: ``1m30s`` is 90 seconds. It was refused ("use a number of
    seconds"), for both clients, where ssh waits that long; 0 (ssh: no timeout of its
    own) leaves the command line's default."""
    config = tmp_path / "config"
    config.write_text(f"Host n0\n  ConnectTimeout {value}\n")
    shown = ssh_g(config)
    assert shown.returncode == 0, shown.stderr
    by_ssh = sshtarget.target_from(sshresolve.parse_options(shown.stdout), SPEC)
    [ours] = sshconfig.resolve_targets(str(config), [SPEC])
    assert ours.connect_timeout == by_ssh.connect_timeout
    seconds = int(dict(line.split(" ", 1) for line in shown.stdout.splitlines())["connecttimeout"])
    assert ours.connect_timeout == (seconds or None)


def test_a_time_outside_the_range_names_its_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host n0\n  ConnectTimeout 2h\n")
    with pytest.raises(UsageError) as refused:
        sshconfig.resolve_targets(str(config), [SPEC])
    assert str(refused.value) == (
        f"{config}:2, host n0: ConnectTimeout '2h': use a number of seconds from 1 to 3,600"
    )


@pytest.mark.parametrize(
    "text",
    [
        "Host n0\n  IdentitiesOnly yes\n  IdentitiesOnly maybe\n",
        "Host other\n  Compression maybe\n",
    ],
    ids=["a later line of the same host", "another host's block"],
)
def test_a_yes_no_value_is_checked_in_every_block(tmp_path: Path, text: str) -> None:
    """ssh refuses the whole config for it; only the value in effect was checked."""
    config = tmp_path / "config"
    config.write_text(text)
    assert ssh_g(config).returncode == 255  # the ground truth
    with pytest.raises(UsageError, match=r":\d: \w+ 'maybe': ssh refuses this value; use yes"):
        sshconfig.resolve_targets(str(config), [SPEC])
