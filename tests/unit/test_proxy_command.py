"""ProxyCommand as ssh runs it: its tokens (``%h %n %p %r %%``, the hosts file's port and
user as ``-p``/``-l``), through ``$SHELL -c "exec ..."`` (redirections, variables and ``~``
are the shell's). Real ssh runs the same config first, as the ground truth."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig, sshproxy


def _config(tmp_path: Path, command: str) -> Path:
    config = tmp_path / "config"
    config.write_text(
        f"Host n0\n  HostName MiXeD.Host\n  Port 22\n  User cfg\n  ProxyCommand {command}\n"
    )
    return config


def test_proxy_command_runs_as_ssh_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARK", "from-env")
    out = tmp_path / "said"
    # Printed to stderr, redirected by the outer shell; stdout stays open a moment (ssh
    # ends the proxy as soon as its stdout closes, racing the write).
    script = "sh -c 'echo \"$@\" >&2; sleep 0.5' sh"
    config = _config(tmp_path, f"{script} %h %n %p %r %% $MARK ~ 2>{out}")
    ssh = ["ssh", "-F", str(config), "-p", "2222", "-l", "bob", "n0", "true"]
    subprocess.run(ssh, capture_output=True, timeout=30, env=os.environ)
    by_ssh = out.read_text()
    out.unlink()
    assert by_ssh == f"mixed.host n0 2222 bob % from-env {os.environ['HOME']}\n"  # ground truth
    spec = HostSpec(host="n0", gpus=1, user="bob", port=2222)  # the hosts file's user:, port:
    [target] = sshconfig.resolve_targets(str(config), [spec])
    assert target.proxy_command is not None
    proxy = sshproxy.ProxyProcess(target.proxy_command)
    assert proxy.process.wait(timeout=30) == 0
    assert out.read_text() == by_ssh


def test_an_unknown_token_is_one_usage_error(tmp_path: Path) -> None:
    config = _config(tmp_path, "nc %h %d")
    with pytest.raises(UsageError, match=r"^SSH config, host n0: ProxyCommand nc %h %d: %d is no"):
        sshconfig.resolve_targets(str(config), [HostSpec(host="n0", gpus=1)])
