"""The payloads kept in the user's cache: read back only whole, built again otherwise."""

from __future__ import annotations

import os
import pwd
import sys
import time
import zlib
from pathlib import Path

import pytest

from clusterlaunch import remote
from clusterlaunch.core import bootstrap
from clusterlaunch.core.defaults import PAYLOAD_KEPT_S
from clusterlaunch.remote import payloadcache

SOURCE_DIGEST = "41cf6794ba4200b8"  # sha256(b"source"), first 16 hex digits
TAG = sys.implementation.cache_tag
build = remote.program_payload.__wrapped__  # without the per-process cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache folder of a user whose ``XDG_CACHE_HOME`` is ``tmp_path``, who stores."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "clusterlaunch"


def stored(name: str) -> Path:
    """The file program ``name``'s payload is kept in."""
    return payloadcache.StoredPayload(name, TAG or "", remote.program_source(name)).path


def assert_whole(payload: bytes, name: str) -> None:
    """``payload`` is program ``name``'s, both parts intact."""
    offset = int(payload[4:12])
    assert bootstrap.is_payload_for_this_python(payload)
    compile(zlib.decompress(payload[offset:]), name, "exec")  # the source part
    assert zlib.decompress(payload[offset:]) == remote.program_source(name)
    zlib.decompress(payload[12:offset])  # the compiled part: its checksum holds


def test_a_stored_payload_is_read_back_and_older_ones_swept(cache: Path) -> None:
    older = cache / f"probe.{TAG}.old.payload"
    recent = cache / f"probe.{TAG}.other.payload"  # another install's
    other = cache / f"agent.{TAG}.old.payload"  # another program's: kept
    cache.mkdir()
    for file in (older, recent, other):
        file.write_bytes(b"from another version")
    week_ago = time.time() - PAYLOAD_KEPT_S - 60
    for file in (older, other):
        os.utime(file, (week_ago, week_ago))
    payload = build("probe")
    assert_whole(payload, "probe")
    assert stored("probe").read_bytes()[: -payloadcache.SEAL_SIZE] == payload
    assert not older.exists() and recent.exists() and other.exists()
    assert stored("probe").stat().st_mode & 0o777 == 0o644
    kept = stored("probe").read_bytes()
    os.utime(stored("probe"), (week_ago, week_ago))
    assert build("probe") == payload  # read back, not built and written again
    assert stored("probe").stat().st_mtime < week_ago + 1 and stored("probe").read_bytes() == kept


def _flip_byte_2000(kept: bytes) -> bytes:
    return kept[:2000] + bytes([kept[2000] ^ 0xFF]) + kept[2001:]


DAMAGES = {
    "a flipped bit in the compiled part": _flip_byte_2000,
    "its source part cut short": lambda kept: kept[:-1000],
    "cut in half": lambda kept: kept[: len(kept) // 2],
    "its header alone": lambda kept: kept[:12],
    "another Python's": lambda kept: b"\x00\x00\r\n" + kept[4:],
    "empty": lambda kept: b"",
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
@pytest.mark.parametrize("name", ["agent", "jobctl"])
def test_a_damaged_payload_is_built_again_and_replaced(cache: Path, damage, name: str) -> None:
    """Byte 2000 of the agent's payload flipped: every command after failed on every host
    (zlib.error on the host), said as "python: ... is not a Python"; jobctl's cut short
    failed on the hosts of another Python only. Neither was ever built again."""
    build(name)
    file = next(cache.glob(f"{name}.*.payload"))
    file.write_bytes(damage(file.read_bytes()))
    damaged = file.read_bytes()
    payload = build(name)
    assert_whole(payload, name)
    assert file.read_bytes() != damaged
    assert build(name) == payload  # read back from the file written again


def test_a_payload_without_its_seal_is_built_again(cache: Path) -> None:
    """An older clusterlaunch's file: the payload alone."""
    payload = build("doctor")
    stored("doctor").write_bytes(payload)
    assert build("doctor") == payload
    assert stored("doctor").read_bytes()[: -payloadcache.SEAL_SIZE] == payload


def test_nothing_is_stored_without_bytecode_writing_or_a_writable_folder(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert_whole(build("probe"), "probe")
    assert not cache.exists()
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache.write_text("not a folder")  # unwritable, even for root
    assert_whole(build("probe"), "probe")
    assert list(cache.parent.iterdir()) == [cache]


def test_payloads_are_kept_by_source_digest_and_interpreter_in_the_user_s_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/home/me/.cache-elsewhere")
    cached = payloadcache.StoredPayload("agent", "tag", b"source").path
    assert cached == Path(
        f"/home/me/.cache-elsewhere/clusterlaunch/agent.tag.{SOURCE_DIGEST}.payload"
    )
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", "/home/me")
    assert payloadcache.StoredPayload("agent", "tag", b"").path.parent == Path(
        "/home/me/.cache/clusterlaunch"
    )


def test_a_python_that_keeps_no_compiled_files_keeps_no_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_cache(*args: object) -> None:
        raise AssertionError("a Python that keeps no compiled files has no stored payload")

    monkeypatch.setattr(sys.implementation, "cache_tag", None)
    monkeypatch.setattr(remote, "StoredPayload", no_cache)
    assert_whole(build("agent"), "agent")


NOBODY = pwd.getpwnam("nobody")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file another user's")


def plant(name: str, cache: Path) -> bytes:
    """A payload of program ``name`` that is not clusterlaunch's, stored as ours would be
    (sealed: anyone may compute a seal); what it holds."""
    planted = bootstrap.encode_payload(name, b"raise SystemExit('planted')\n")
    file = stored(name)
    cache.mkdir(exist_ok=True)
    file.write_bytes(planted + seal_of(name, planted))
    return file.read_bytes()


def seal_of(name: str, payload: bytes) -> bytes:
    return payloadcache.StoredPayload(name, TAG or "", remote.program_source(name)).seal(payload)


def _their_folder(cache: Path) -> None:
    for path in (cache, stored("jobctl")):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)


def _a_folder_all_may_write(cache: Path) -> None:
    cache.chmod(0o1777)


def _a_folder_its_group_may_write(cache: Path) -> None:
    cache.chmod(0o775)


def _their_file(cache: Path) -> None:
    os.chown(stored("jobctl"), NOBODY.pw_uid, NOBODY.pw_gid)


def _a_file_all_may_write(cache: Path) -> None:
    stored("jobctl").chmod(0o666)


def _a_link_to_their_folder(cache: Path) -> None:
    theirs = cache.with_name("theirs")
    cache.rename(theirs)
    cache.symlink_to(theirs)
    _their_folder(theirs)


UNTRUSTED = {
    "a folder of another user's": _their_folder,
    "a folder all may write in (1777)": _a_folder_all_may_write,
    "a folder its group may write in": _a_folder_its_group_may_write,
    "another user's file": _their_file,
    "a file all may write": _a_file_all_may_write,
    "a link to another user's folder": _a_link_to_their_folder,
}


@as_root
@pytest.mark.parametrize("make_untrusted", UNTRUSTED.values(), ids=UNTRUSTED.keys())
def test_a_cache_another_user_may_have_written_is_not_run(cache: Path, make_untrusted) -> None:
    """XDG_CACHE_HOME on a 1777 folder: uid 1000's jobctl.TAG.DIGEST.payload ran on every
    host of root's `ps`, as root."""
    planted = plant("jobctl", cache)
    make_untrusted(cache)
    folder = cache.resolve()
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    payload = build("jobctl")
    assert_whole(payload, "jobctl")
    assert build("jobctl") == payload  # the planted one is never read
    if make_untrusted in (_their_folder, _a_link_to_their_folder):  # nor written into
        assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
        assert before == {stored("jobctl").name: planted}
    else:  # a folder of ours: made one only we may write in, the file replaced
        assert not folder.stat().st_mode & 0o022
        assert stored("jobctl").read_bytes() == payload + seal_of("jobctl", payload)
        assert stored("jobctl").stat().st_uid == os.getuid()


def test_a_folder_of_ours_group_may_write_in_is_used_once_it_may_not(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older clusterlaunch made it as the umask said: 0775 under Debian's 002."""
    payload = build("agent")
    cache.chmod(0o775)
    reads: list[bytes | None] = []  # what each command found in the cache
    original = payloadcache.StoredPayload.read

    def read(self: payloadcache.StoredPayload) -> bytes | None:
        reads.append(original(self))
        return reads[-1]

    monkeypatch.setattr(payloadcache.StoredPayload, "read", read)
    assert build("agent") == payload and reads == [None]  # not read from there
    assert cache.stat().st_mode & 0o7777 == 0o755
    assert build("agent") == payload and reads == [None, payload]  # made private, then read


@as_root
def test_root_makes_no_cache_folder_in_another_user_s_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sudo keeps HOME: root's folder there would have been one that user's commands could
    no longer use."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, NOBODY.pw_uid, NOBODY.pw_gid)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert_whole(build("probe"), "probe")
    assert list(home.iterdir()) == []
    (home / ".cache").mkdir()  # root's own: made and used
    build("probe")
    assert stored("probe").parent.stat().st_mode & 0o777 == 0o700
