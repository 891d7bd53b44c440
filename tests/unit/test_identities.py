"""Identity files are read once per run, whatever number of hosts connect with them."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path
from typing import Any
from unittest import mock

import paramiko
import pytest

from clusterlaunch.core.model import SshTarget
from clusterlaunch.transport.identities import IdentityFiles


@pytest.fixture(scope="module")
def ed25519_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30
    )
    return path


def _quiet_client(identities: IdentityFiles) -> Any:
    client = identities.client(SshTarget(alias="n0", hostname="10.0.0.1"))
    client._log = lambda *args: None  # paramiko logs through the connection's transport
    return client


def test_every_client_of_a_run_gets_the_key_read_once(ed25519_key: Path) -> None:
    identities = IdentityFiles()
    types = (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)
    with mock.patch("builtins.open", wraps=open) as opened:
        keys, failures = [], 0
        for _ in range(8):  # eight hosts: each tries every type in turn, as paramiko's _auth
            client = _quiet_client(identities)
            for klass in types:
                try:
                    keys.append(client._key_from_filepath(str(ed25519_key), klass, None))
                    break
                except paramiko.SSHException:
                    failures += 1
    assert len(keys) == 8 and all(key is keys[0] for key in keys)
    assert isinstance(keys[0], paramiko.Ed25519Key) and failures == 16  # RSA, ECDSA per host
    reads = [c for c in opened.call_args_list if c.args and str(c.args[0]) == str(ed25519_key)]
    assert len(reads) == 3  # once per type, not once per type per host (24)


def test_a_new_run_reads_the_file_again(ed25519_key: Path) -> None:
    first = _quiet_client(IdentityFiles())._key_from_filepath(
        str(ed25519_key), paramiko.Ed25519Key, None
    )
    second = _quiet_client(IdentityFiles())._key_from_filepath(
        str(ed25519_key), paramiko.Ed25519Key, None
    )
    assert first is not second and first == second


def test_hosts_asking_at_once_share_one_read_and_one_failure() -> None:
    identities = IdentityFiles()
    calls: list[tuple[str, Any]] = []
    start = threading.Barrier(16)

    def read(filename: str, klass: Any, passphrase: Any) -> Any:
        calls.append((filename, klass))
        if klass is paramiko.RSAKey:
            raise paramiko.SSHException("not a valid RSA private key file")
        return mock.sentinel.key

    outcomes: list[object] = []

    def host() -> None:
        start.wait()
        for klass in (paramiko.RSAKey, paramiko.Ed25519Key):
            try:
                outcomes.append(identities.key("id", klass, None, read))
            except paramiko.SSHException as exc:
                outcomes.append(str(exc))

    threads = [threading.Thread(target=host) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(calls, key=str) == sorted(
        [("id", paramiko.RSAKey), ("id", paramiko.Ed25519Key)], key=str
    )
    assert outcomes.count(mock.sentinel.key) == 16
    assert outcomes.count("not a valid RSA private key file") == 16
