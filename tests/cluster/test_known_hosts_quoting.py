"""Known-hosts files named as ssh names them: quoted, with spaces, several on a line, or
``none``. paramiko kept ``"/a" "/b"`` as one name (``/a" "/b``) and a path with a space
as two, so a file holding a *changed* key for the host went unread: the paramiko client
connected where ssh refuses, and recorded the key in a file of its own (``none`` too, in
the working directory). ``ssh -F`` with the same config is the ground truth."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.cluster.support import WORKERS, exec_echo_hi, write_hosts

pytestmark = [pytest.mark.cluster]

WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHXfVMzCB2bS1fyOXSQ8UO2qqgeuNsMJ0Uub2WF6ac7b\n"


def _config(cluster, tmp_path: Path, files: str, strict: str) -> Path:
    text = re.sub(r"(?m)^\s*UserKnownHostsFile .*$", f"    UserKnownHostsFile {files}",
                  cluster.ssh_config.read_text())  # fmt: skip
    text = re.sub(r"(?m)^\s*StrictHostKeyChecking .*$", f"    StrictHostKeyChecking {strict}", text)
    config = tmp_path / "ssh_config"
    config.write_text(text)
    return config


@pytest.mark.parametrize(
    "written",
    [
        '"{d}/first" "{d}/changed"',  # several, quoted: the second holds a changed key
        '"{d}/my changed"',  # a space in the name
        "'{d}/changed'",  # single quotes
    ],
    ids=["two quoted", "a space", "single quotes"],
)
def test_a_changed_key_in_a_quoted_file_is_refused_as_ssh_refuses_it(
    sim_cluster_factory, tmp_path: Path, written: str
) -> None:
    cluster = sim_cluster_factory(1)
    node0 = cluster.host("node0")
    files = tmp_path / "kh"
    files.mkdir()
    names = re.findall(r"""["']([^"']+)["']""", written.format(d=files))
    for name in names:
        Path(name).write_text("")
    Path(names[-1]).write_text(f"[{node0.addr}]:{node0.port} {WRONG_KEY}")
    config = _config(cluster, tmp_path, written.format(d=files), "accept-new")
    before = {p: p.read_text() for p in files.iterdir()}
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "true"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert by_ssh.returncode == 255 and "has changed" in by_ssh.stderr, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    for client in ("paramiko", "openssh"):
        result = exec_echo_hi(client, hosts, config=config)
        assert result.returncode != 0 and "HOST KEY CHANGED" in result.stderr, (client, result)
        assert f"-f {names[-1]}" in result.stderr  # the file that holds it
    assert {p: p.read_text() for p in files.iterdir()} == before  # nothing recorded
    assert not (WORKERS / "'").exists()  # where the CLI runs: a quote was a directory


def test_user_known_hosts_file_none_has_nowhere_to_record_a_key(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(1)
    config = _config(cluster, tmp_path, "none", "accept-new")
    by_ssh = subprocess.run(["ssh", "-F", str(config), "node0", "true"], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert by_ssh.returncode == 255 and "verification failed" in by_ssh.stderr, by_ssh.stderr
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1)])
    result = exec_echo_hi("paramiko", hosts, config=config)
    assert result.returncode == 2 and "unknown host key" in result.stderr, result.stderr
    assert not (tmp_path / "none").exists()
