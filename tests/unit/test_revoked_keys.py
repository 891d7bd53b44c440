"""What the OpenSSH client's refusal of a revoked host key reads as (sshfailure.classify);
real sshd: tests/cluster/test_revoked_host_keys.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
from pathlib import Path

from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import sshfailure

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN5ZLYp3cFWJXnhA7U9kAnIuNhChD3v+5yyULb52df8z"
SAID = (
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
    "@       WARNING: REVOKED HOST KEY DETECTED!               @\n"
    "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
    "The ED25519 host key for [10.0.0.1]:2200 is marked as revoked.\n"
    "This could mean that a stolen key is being used to\nimpersonate this host.\n"
    "ED25519 host key for [10.0.0.1]:2200 was revoked and you have requested strict checking.\n"
    "Host key verification failed.\n"
)
REFUSED = "; refusing to connect, as ssh does, and nothing was started there."


def _hashed(name: str) -> str:
    salt = b"0123456789abcdefghij"
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _target(tmp_path: Path, *files: Path) -> SshTarget:
    return SshTarget(
        alias="n0",
        hostname="10.0.0.1",
        port=2200,
        known_hosts_files=tuple(str(file) for file in files),
        global_known_hosts_files=(str(tmp_path / "missing"),),
    )


def test_a_revoked_key_names_the_revoked_lines_that_apply_to_the_host(tmp_path: Path) -> None:
    user = tmp_path / "known_hosts"
    user.write_text(
        f"[10.0.0.1]:2200 {KEY}\n"
        f"@revoked other.example {KEY}\n"  # another host's: not this one's
        f"@revoked {_hashed('[10.0.0.1]:2200')} {KEY}\n"
        f"@revoked !*10.0.0.1*,* {KEY}\n"  # a negation: not this one's
    )
    other = tmp_path / "known_hosts2"
    other.write_text(f"# the site's\n@revoked 10.0.0.* {KEY}\n")
    failure = sshfailure.classify(_target(tmp_path, user, other), SAID, None)
    assert failure.host_key
    assert failure.detail == (
        f"HOST KEY REVOKED: its ED25519 key is marked @revoked in {user}:3, {other}:2{REFUSED}"
        " A revoked key may be a stolen one: ask the host's administrator"
    )
    assert "unknown" not in failure.detail and "add it" not in failure.detail


def test_a_revoked_key_whose_line_cannot_be_read_is_said_without_it(tmp_path: Path) -> None:
    failure = sshfailure.classify(_target(tmp_path, tmp_path / "gone"), SAID, None)
    assert failure.detail.startswith(
        f"HOST KEY REVOKED: its ED25519 key is marked @revoked in a known_hosts file{REFUSED}"
    )


def test_a_key_revoked_by_a_revoked_host_keys_file_names_it(tmp_path: Path) -> None:
    said = (
        "Host key ED25519 SHA256:Ab/cd+ef revoked by file /etc/ssh/revoked_keys\n"
        "Host key verification failed.\n"
    )
    failure = sshfailure.classify(_target(tmp_path), said, None)
    assert failure.host_key
    assert failure.detail.startswith(
        "HOST KEY REVOKED: its ED25519 SHA256:Ab/cd+ef key is revoked by the RevokedHostKeys "
        f"file /etc/ssh/revoked_keys{REFUSED}"
    )
