"""A second word where ssh takes one (``ssh -G`` is the ground truth).

OpenSSH refuses the whole config at a one-argument keyword with more ("keyword user
extra arguments at end of line"), in whatever block it is. paramiko took the rest of
the line as the value: ``User alice bob`` logged in as "alice bob", ``Port 22 2222``
was a traceback-free "invalid port", ``IdentityFile ~/.ssh/a ~/.ssh/b`` a file
named with a space.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshkeywords
from tests.unit.sshtruth import ssh_g

SPEC = HostSpec(host="n0", gpus=1)
TWO = {
    "port": "22 2222",
    "connecttimeout": "5 6",
    "connectionattempts": "1 2",
    "serveraliveinterval": "5 6",
    "serveralivecountmax": "3 4",
    "canonicalizemaxdots": "1 2",
    "numberofpasswordprompts": "1 2",
    "dynamicforward": "1080 1081",
    "ciphers": "aes128-ctr aes256-ctr",
    "macs": "hmac-sha2-256 hmac-sha1",
    "kexalgorithms": "curve25519-sha256 ecdh-sha2-nistp256",
    "hostkeyalgorithms": "ssh-ed25519 rsa-sha2-256",
    "casignaturealgorithms": "ssh-ed25519 rsa-sha2-256",
    "pubkeyacceptedalgorithms": "ssh-ed25519 rsa-sha2-256",
    "addressfamily": "inet inet6",
    "loglevel": "INFO DEBUG",
    "requesttty": "no yes",
    "tunnel": "no yes",
    "escapechar": "none x",
    "sessiontype": "default none",
    "fingerprinthash": "sha256 md5",
    "controlpersist": "10 20",
}
"""Two values of the keyword's own kind (ssh checks the first before the count)."""
ONE_WORD = sorted(sshkeywords._ONE_WORD)


def _value(keyword: str) -> str:
    flags = ("stricthostkeychecking", "forwardagent", "verifyhostkeydns", "updatehostkeys")
    if keyword in sshkeywords.YES_OR_NO or keyword in (*flags, "canonicalizehostname"):
        return "yes no"
    if keyword == "controlmaster":
        return "auto no"
    return TWO.get(keyword, "a b")


@pytest.mark.parametrize("keyword", ONE_WORD)
def test_a_second_word_is_refused_as_ssh_refuses_it_in_another_hosts_block(
    tmp_path: Path, keyword: str
) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host n0\n  HostName 127.0.0.1\nHost other\n  {keyword} {_value(keyword)}\n")
    shown = ssh_g(config)
    assert shown.returncode != 0 and "extra arguments at end of line" in shown.stderr
    with pytest.raises(UsageError) as refused:
        sshconfig.resolve_targets(str(config), [SPEC])
    said = str(refused.value)
    assert said.startswith(f"{config}:4: {sshkeywords.spelled(keyword)} ")
    assert said.endswith(
        "ssh refuses a second word here; quote a value with spaces, or remove the rest"
    )


@pytest.mark.parametrize(
    "line",
    [
        'User "alice bob"',
        "User alice # the admin",
        "User=alice",
        'IdentityFile "/keys/my key"',
        r"IdentityFile /keys/my\ key",
        "RekeyLimit 1G 1h",
        "IPQoS af21 cs1",
        "SendEnv LANG LC_*",
        "User alice\t",
    ],
)
def test_what_ssh_takes_as_one_word_passes(tmp_path: Path, line: str) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host n0\n  HostName 127.0.0.1\n  {line}\n")
    shown = ssh_g(config)
    assert shown.returncode == 0, shown.stderr
    sshconfig.resolve_targets(str(config), [SPEC])  # no UsageError


def test_the_user_is_never_two_words(tmp_path: Path) -> None:
    """What the paramiko client would have logged in as."""
    config = tmp_path / "config"
    config.write_text("Host n0\n  HostName 127.0.0.1\n  User alice bob\n")
    with pytest.raises(UsageError, match=r":3: User alice bob: ssh refuses a second word"):
        sshconfig.resolve_targets(str(config), [SPEC])
