"""A keyword ssh does not know: ssh refuses the config, and so does clusterlaunch, in
ssh's words and naming the line (``ssh -G`` is the ground truth); paramiko's parser
had read past a typo such as ``StrictHostKeyCheckng yes`` or ``ProxyJmp bastion``."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshkeywords, sshresolve
from tests.unit.sshtruth import ssh_g

SPEC = HostSpec(host="n0", gpus=1)


def test_every_keyword_this_ssh_prints_is_known(tmp_path: Path) -> None:
    """The table lets every option of the local ssh pass without asking it."""
    config = tmp_path / "config"
    config.write_text("Host n0\n    HostName 10.0.0.1\n")
    printed = {line.split(" ", 1)[0].lower() for line in ssh_g(config).stdout.splitlines()}
    assert len(printed) > 50 and printed <= sshkeywords.KNOWN, printed - sshkeywords.KNOWN


@pytest.mark.parametrize(
    "line", ["StrictHostKeyCheckng yes", "ProxyJmp bastion", "IdentitiesOnyl=yes", "Foo bar"]
)
def test_a_keyword_ssh_does_not_know_is_refused_as_ssh_refuses_it(
    tmp_path: Path, line: str
) -> None:
    config = tmp_path / "config"
    config.write_text(f"Host n0\n    HostName 10.0.0.1\n    {line}\n")
    by_ssh = ssh_g(config)
    keyword = line.replace("=", " ").split()[0]
    said = f"{config}: line 3: Bad configuration option: {keyword.lower()}"
    assert by_ssh.returncode == 255 and said in by_ssh.stderr
    with pytest.raises(UsageError) as refused:
        sshconfig.resolve_targets(str(config), [SPEC])
    assert str(refused.value) == (
        f"{config}:3: {keyword}: ssh refuses this config ({said}); correct the keyword, "
        "or name it in IgnoreUnknown"
    )


@pytest.mark.parametrize(
    ("text", "accepted"),
    [
        ("IgnoreUnknown Foo*,Other\nHost n0\n    FooBar 1\n", True),
        ("Host n0\n    FooBar 1\n    IgnoreUnknown FooBar\n", False),  # only later lines
    ],
)
def test_ignore_unknown_as_ssh_reads_it(tmp_path: Path, text: str, accepted: bool) -> None:
    config = tmp_path / "config"
    config.write_text(text)
    assert (ssh_g(config).returncode == 0) is accepted
    if accepted:
        assert sshconfig.resolve_targets(str(config), [SPEC])[0].hostname == "n0"
    else:
        with pytest.raises(UsageError, match=r":2: FooBar: ssh refuses this config"):
            sshconfig.resolve_targets(str(config), [SPEC])


def test_without_ssh_nothing_can_be_asked_and_nothing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config"
    config.write_text("Host n0\n    FooBar 1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))
    assert sshconfig.resolve_targets(str(config), [SPEC])[0].hostname == "n0"


def test_ssh_is_asked_once_per_config_and_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword this table lacks and ssh accepts (a newer OpenSSH's, here Port taken out
    of the table): the paramiko client's check resolves a jump host again for every target
    behind it, and each asked ssh again."""
    monkeypatch.setattr(sshkeywords, "KNOWN", sshkeywords.KNOWN - {"port"})
    asked: list[str] = []
    real = sshresolve.refusal
    monkeypatch.setattr(sshresolve, "refusal", lambda *a: asked.append(a[1]) or real(*a))
    config = tmp_path / "config"
    config.write_text("Host jump\n    Port 2222\n")
    loaded = sshconfig.read_ssh_config(str(config))
    assert [sshconfig.jump_host(loaded, "jump").port for _ in range(3)] == [2222] * 3
    assert asked == ["jump"]
