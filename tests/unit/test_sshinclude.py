"""Include expansion (ssh_config(5)) and what the SSH config resolves to through it."""

from __future__ import annotations

import getpass
import shutil
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig
from clusterlaunch.transport.sshinclude import MAX_DEPTH, flatten, split_line
from clusterlaunch.transport.sshresolve import parse_options


def _resolve(config: Path, host: str) -> tuple[str, int, str | None]:
    target = sshconfig.resolve_targets(str(config), [HostSpec(host=host, gpus=1)])[0]
    return target.hostname, target.port, target.user


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    return tmp_path / "home"


def test_globbed_includes_apply_in_lexical_order(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b.conf").write_text("Host gpu*\n    Port 2222\n    User second\n")
    (tmp_path / "d" / "a.conf").write_text("Host gpu1\n    HostName 10.0.0.1\n    User first\n")
    config = tmp_path / "config"
    config.write_text(f"Include {tmp_path}/d/*.conf\nHost *\n    Port 99\n")
    assert _resolve(config, "gpu1") == ("10.0.0.1", 2222, "first")  # first value wins
    assert _resolve(config, "gpu7") == ("gpu7", 2222, "second")
    assert _resolve(config, "other") == ("other", 99, None)
    for host in ("gpu1", "gpu7", "other"):
        assert _resolve(config, host) == _ssh_G(config, host)


def test_relative_include_is_under_home_ssh(tmp_path: Path, home: Path) -> None:
    (home / ".ssh" / "cluster.conf").write_text("Host n0\n    HostName 10.1.1.1\n")
    config = tmp_path / "elsewhere.conf"  # relative to ~/.ssh, not to this file
    config.write_text("Include cluster.conf missing-*.conf\n")
    assert _resolve(config, "n0")[0] == "10.1.1.1" == _ssh_G(config, "n0")[0]


def test_include_inside_a_host_block_applies_only_there(tmp_path: Path) -> None:
    (tmp_path / "inner").write_text("User inner\nHost *x*\n    Port 7\n")
    config = tmp_path / "config"
    config.write_text(
        f"Host a*\n    Include {tmp_path}/inner\n    HostName after-include\n"
        "Host *\n    User outer\n"
    )
    # In a*'s block: the included lines, and the including block resumed after them.
    assert _resolve(config, "abc") == ("after-include", 22, "inner")
    # x1 does not match a*, so neither does the included "Host *x*" (a conjunction, as in ssh).
    assert _resolve(config, "x1") == ("x1", 22, "outer")
    assert _resolve(config, "ax1") == ("after-include", 7, "inner")
    for host in ("abc", "x1", "ax1"):  # and exactly what ssh itself makes of it
        assert _resolve(config, host) == _ssh_G(config, host)


def _ssh_G(config: Path, host: str) -> tuple[str, int, str | None]:
    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    options = parse_options(
        subprocess.run(
            ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True
        ).stdout
    )
    user = options.get("user")
    return options["hostname"], int(options["port"]), None if user == getpass.getuser() else user


def test_include_at_the_top_keeps_the_rest_global(tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("Host n1\n    HostName 10.2.2.2\n")
    config = tmp_path / "config"
    config.write_text(f"Include {tmp_path}/hosts\nUser everyone\n")
    # Without reopening the global block, "User" would land in n1's block only.
    assert _resolve(config, "n1") == ("10.2.2.2", 22, "everyone") == _ssh_G(config, "n1")
    assert _resolve(config, "n2") == ("n2", 22, "everyone") == _ssh_G(config, "n2")


def test_include_cycle_is_a_usage_error_naming_the_line(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(f"# loops\nInclude {config}\n")
    with pytest.raises(UsageError, match=rf"{config}:2: Include nested more than {MAX_DEPTH}"):
        flatten(str(config))


def test_every_line_remembers_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "inc").write_text("\n\nHost z\n    CertificateFile ~/c.pub\n")
    config = tmp_path / "config"
    config.write_text(f"Host y\n    Port 1\nInclude {tmp_path}/inc\n")
    loaded = sshconfig.read_ssh_config(str(config))
    cert = next(line for line in loaded.lines if line.keyword == "certificatefile")
    assert cert.where == f"{tmp_path}/inc:4"
    assert loaded.where("certificatefile", "z", "~/c.pub") == f"{tmp_path}/inc:4"


def test_match_exec_is_found_and_resolution_goes_through_ssh(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Host n*\n    User u\nMatch host n1 exec "true"\n    Port 2200\n')
    loaded = sshconfig.read_ssh_config(str(config))
    found = loaded.ssh_only
    assert str(found) == f"{config}:3: Match exec"
    # ssh -G runs the exec as ssh would: n1 gets the port, n2 does not.
    assert _resolve(config, "n1") == ("n1", 2200, "u")
    assert _resolve(config, "n2") == ("n2", 22, "u")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Host = a b ", ("host", "a b")),
        ("Include=x.conf", ("include", "x.conf")),
        ("# comment", ("", "")),
        ("", ("", "")),
        ("IdentityFile ~/a=b", ("identityfile", "~/a=b")),
    ],
)
def test_split_line(text: str, expected: tuple[str, str]) -> None:
    assert split_line(text) == expected


def test_ssh_G_output_maps_ask_to_the_default() -> None:
    found = parse_options(
        "hostname 10.0.0.5\nport 2222\nuser me\nstricthostkeychecking ask\n"
        "proxyjump none\nconnecttimeout none\nidentityfile ~/.ssh/id_rsa\n"
    )
    assert found == {"hostname": "10.0.0.5", "port": "2222", "user": "me"}
    # As ssh -G prints yes; read as ssh reads it (test_ssh_flags) by target_from.
    assert parse_options("stricthostkeychecking true\n") == {"stricthostkeychecking": "true"}
