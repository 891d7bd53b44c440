"""The keys the paramiko client offers, in ssh's order (sshconnect2.c pubkey_prepare):
agent keys first, a configured file's key through the agent; IdentitiesOnly keeps only
the agent's keys that a file names; then the files the agent does not hold. The cluster
tier checks the order against real ssh (tests/cluster/test_ssh_keys.py)."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest

from clusterlaunch.transport import sshauth


class _AgentKey:
    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def asbytes(self) -> bytes:
        return self.blob

    def __repr__(self) -> str:
        return f"agent:{self.blob.decode()}"


A, B, C = _AgentKey(b"a"), _AgentKey(b"b"), _AgentKey(b"c")
FILES = ["/k/one", "/k/two", "/k/three"]
BLOBS = {"/k/one": b"x", "/k/two": b"b", "/k/three": None}  # two's key is B; three unread


@pytest.mark.parametrize(
    ("identities_only", "expected"),
    [
        (False, [A, B, C, "/k/one", "/k/three"]),  # B stands for /k/two, in the agent's place
        (True, [B, "/k/one", "/k/three"]),
    ],
)
def test_agent_keys_first_then_the_files_it_does_not_hold(
    identities_only: bool, expected: list[object]
) -> None:
    offered = sshauth.ordered([A, B, C], FILES, BLOBS, identities_only)  # type: ignore[list-item]
    assert offered == expected


def test_no_agent_keys_leaves_the_files_in_their_order() -> None:
    assert sshauth.ordered([], FILES, {}, identities_only=True) == FILES


def test_a_files_public_key_comes_from_its_pub_else_from_the_file(tmp_path: Path) -> None:
    pub = tmp_path / "k.pub"
    pub.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIN5gnNP1GyQRzR8XWXyP1PtVCGbTHozmWflzzbv9VwPC c\n"
    )
    assert (
        sshauth.public_blob(str(tmp_path / "k"), _unreadable)[:15] == b"\x00\x00\x00\x0bssh-ed25519"
    )
    pub.write_text("garbage")
    assert sshauth.public_blob(str(tmp_path / "k"), _unreadable) is None


def _unreadable(filename: str) -> paramiko.PKey:
    raise paramiko.PasswordRequiredException(f"{filename}: encrypted")
