"""known_hosts as ssh reads it, for the paramiko client: names, patterns, several keys.

paramiko's own HostKeys matches names only exactly or hashed, compares the first
line's key of a type alone and scans every line; ``hostkeys.TolerantHostKeys``
matches as OpenSSH does, and these tests set it beside paramiko's where they differ.
"""

from __future__ import annotations

from pathlib import Path

import paramiko

from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport import hostkeys, hostnames

KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIN5gnNP1GyQRzR8XWXyP1PtVCGbTHozmWflzzbv9VwPC"


def _target(tmp_path: Path, host: str = "10.0.0.1", port: int = 22) -> SshTarget:
    return SshTarget(
        alias="n0", hostname=host, port=port, known_hosts_files=(str(tmp_path / "known_hosts"),)
    )


def test_the_indexed_lookup_finds_what_paramikos_scan_finds(tmp_path: Path) -> None:
    # Plain, several names, hashed, a name on two lines of one key type (the first
    # wins), another port; paramiko's own HostKeys scans every line.
    first, second = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    ecdsa = first.get_name()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"10.0.0.1 ssh-ed25519 {KEY}\n"
        f"a.example,10.0.0.2 ssh-ed25519 {KEY}\n"
        f"{paramiko.HostKeys.hash_host('10.0.0.3')} ssh-ed25519 {KEY}\n"
        f"{paramiko.HostKeys.hash_host('10.0.0.1')} {ecdsa} {first.get_base64()}\n"
        f"10.0.0.1 {ecdsa} {second.get_base64()}\n"
        f"[10.0.0.4]:2222 {ecdsa} {second.get_base64()}\n"
    )
    ours = hostkeys.TolerantHostKeys()
    ours.load(str(known))
    theirs = paramiko.HostKeys(str(known))
    names = ["10.0.0.1", "a.example", "10.0.0.2", "10.0.0.3", "[10.0.0.4]:2222", "10.0.0.4", "x"]
    for name in names:
        found, expected = ours.lookup(name), theirs.lookup(name)
        assert (found is None) == (expected is None), name
        if expected is not None:
            assert {t: found[t].asbytes() for t in found} == {
                t: expected[t].asbytes() for t in expected
            }, name
    assert ours.lookup("10.0.0.1")[ecdsa].asbytes() == first.asbytes()  # file order kept
    ours.add("10.0.0.9", ecdsa, second)
    assert ours.lookup("10.0.0.9")[ecdsa].asbytes() == second.asbytes()  # added: found too


def test_host_names_are_compared_as_ssh_compares_them_lowercased(tmp_path: Path) -> None:
    """ssh lowercases the host name it looks up and compares plain known_hosts names
    without regard to case; paramiko compared them exactly."""
    known = tmp_path / "known_hosts"
    known.write_text(f"[MiXeD.Example]:2222 ssh-ed25519 {KEY}\n")
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(known))
    target = SshTarget(alias="NoDe0", hostname="MIXED.example", port=2222)
    assert hostnames.known_hosts_name(target) == "[mixed.example]:2222"
    assert keys.lookup(hostnames.known_hosts_name(target)) is not None
    assert paramiko.HostKeys(str(known)).lookup("[mixed.example]:2222") is None  # before


def test_pattern_lines_name_the_hosts_ssh_finds_under_them(tmp_path: Path) -> None:
    """paramiko matches known_hosts names only exactly or hashed: a host under a
    pattern line was unknown to it (so accept-new recorded a key ssh calls changed)."""
    other = paramiko.ECDSAKey.generate()
    ecdsa = other.get_name()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"*.cluster,!bastion.cluster ssh-ed25519 {KEY}\n"
        f"[10.0.0.?]:2222 {ecdsa} {other.get_base64()}\n"
        f"node7.cluster {ecdsa} {other.get_base64()}\n"
    )
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(known))
    found = keys.lookup("node7.cluster")
    assert {name: found[name].get_base64() for name in found} == {
        "ssh-ed25519": KEY,  # from the pattern line
        ecdsa: other.get_base64(),  # from the line naming it
    }
    assert set(keys.lookup("node8.cluster")) == {"ssh-ed25519"}
    assert keys.lookup("bastion.cluster") is None  # its negation vetoes the line
    assert keys.lookup("node7.example") is None
    assert set(keys.lookup("[10.0.0.5]:2222")) == {ecdsa}
    assert keys.lookup("10.0.0.5") is None and keys.lookup("[10.0.0.15]:2222") is None
    assert paramiko.HostKeys(str(known)).lookup("node8.cluster") is None  # paramiko's own


def test_a_changed_key_s_message_names_the_line_that_holds_the_known_key(
    tmp_path: Path,
) -> None:
    """As the OpenSSH client's does (ssh's "Offending key in FILE:LINE"); for a pattern
    line, that ssh-keygen -R deletes the whole line (OpenSSH 9.2 does: tried)."""
    known_key, offered = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    ecdsa = known_key.get_name()
    known = tmp_path / "known_hosts"
    known.write_text(
        "# the first line\n"
        f"[10.0.0.2]:2222 {ecdsa} {known_key.get_base64()}\n"  # another host's
        f"[10.0.0.*]:2222,!10.0.0.7 {ecdsa} {known_key.get_base64()}\n"
        f"10.0.0.1 ssh-ed25519 {KEY}\n"
    )
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(known))
    changed = paramiko.BadHostKeyException("[10.0.0.1]:2222", offered, known_key)
    assert hostkeys.changed_key_message(_target(tmp_path, port=2222), changed, keys) == (
        f"HOST KEY CHANGED (known {ecdsa} {known_key.fingerprint} in {known}:3, offered "
        f"{ecdsa} {offered.fingerprint}); refusing to connect. If the host was really "
        f"reinstalled, remove the old key: ssh-keygen -R '[10.0.0.1]:2222' -f {known} "
        "(which deletes the line `[10.0.0.*]:2222,!10.0.0.7`, for every host it names)"
    )
    plain = keys.lookup("10.0.0.1")["ssh-ed25519"]
    changed = paramiko.BadHostKeyException("10.0.0.1", offered, plain)
    message = hostkeys.changed_key_message(_target(tmp_path), changed, keys)
    assert f" {plain.fingerprint} in {known}:4, offered " in message
    assert message.endswith(f"ssh-keygen -R '10.0.0.1' -f {known}")


def test_a_host_s_key_on_any_line_naming_it_is_its_known_key(tmp_path: Path) -> None:
    """ssh accepts a key on any line that names the host ("keep looking for HOST_OK");
    paramiko compared the first line's of that type alone."""
    older, newer, stranger = (paramiko.ECDSAKey.generate() for _ in range(3))
    ecdsa = older.get_name()
    known = tmp_path / "known_hosts"
    known.write_text(
        f"[10.0.0.*]:2222 {ecdsa} {older.get_base64()}\n"
        f"[10.0.0.1]:2222 {ecdsa} {newer.get_base64()}\n"
        f"[10.0.0.1]:2222 {ecdsa} {newer.get_base64()}\n"  # a copy: one key, not two
    )
    keys = hostkeys.TolerantHostKeys()
    keys.load(str(known))
    known_key = keys.lookup("[10.0.0.1]:2222")[ecdsa]
    assert known_key == newer and known_key == older
    assert (known_key != newer) is False  # paramiko's own check: our_key != server_key
    assert known_key != stranger and known_key.asbytes() == older.asbytes()  # the first's
    assert isinstance(keys.lookup("[10.0.0.2]:2222")[ecdsa], paramiko.ECDSAKey)  # one line
    assert paramiko.HostKeys(str(known)).lookup("[10.0.0.1]:2222")[ecdsa] != older


def test_hashed_and_negated_patterns(tmp_path: Path) -> None:
    hashed = paramiko.HostKeys.hash_host("10.0.0.1")
    assert hostnames.host_matches(hashed, "10.0.0.1")
    assert not hostnames.host_matches(hashed, "10.0.0.2")
    assert not hostnames.host_matches("10.0.0.*,!10.0.0.1", "10.0.0.1")
    assert hostnames.host_matches("10.0.0.*,!10.0.0.1", "10.0.0.3")
    assert not hostnames.host_matches("|1|bad|base64!", "10.0.0.1")
