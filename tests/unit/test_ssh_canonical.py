"""Host names canonicalized as ssh canonicalizes them, against ``ssh -G`` in a mount
namespace whose resolver is a DNS server of the test's own (tests/dns.py).

paramiko's lookup canonicalized the name given instead of HostName and wrote the
result over HostName (``alias1``, HostName ``n1``: reached as ``alias1``), and
canonicalized hosts behind a jump host, which ssh leaves to the proxy (``gpu2``:
another block's Port applied).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import dns, dnsgate

pytestmark = pytest.mark.skipif(dns.why_not() is not None, reason=dns.why_not() or "")

NAMES = {
    "vm.cl.test": "127.0.0.5",
    "gpu1.cl.test": "127.0.0.6",
    "gpu2.cl.test": "127.0.0.7",
    "n1.cl.test": "127.0.0.8",
    "two.sub.cl.test": "127.0.0.9",
    "x-n1.cl.test": "127.0.0.10",
}

_OURS = """
import json, pwd, os, sys
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import sshconfig
try:
    [t] = sshconfig.resolve_targets(sys.argv[2], [HostSpec(host=sys.argv[1], gpus=1)])
except UsageError as exc:
    print(json.dumps(str(exc)))
else:
    user = t.user or pwd.getpwuid(os.getuid()).pw_name  # None: ssh's default, the local user
    print(json.dumps([t.hostname, t.port, user, t.proxy_jump]))
"""

_CHECKED = """
import json, sys
from clusterlaunch.core.model import HostSpec
from clusterlaunch.transport import hostkeys, sshcompat, sshconfig
specs = [HostSpec(host=host, gpus=1) for host in sys.argv[2:]]
targets = sshconfig.resolve_targets(sys.argv[1], specs)
sshcompat.check_paramiko_can_connect(targets, sys.argv[1], hostkeys.KnownHosts())
print(json.dumps([target.hostname for target in targets]))
"""
"""What the paramiko client does before it connects: resolve every host, then check it."""

CONFIGS = {
    "yes": (
        "CanonicalizeHostname yes\nCanonicalDomains nope.test cl.test\n"
        "Host gpu2\n  ProxyJump vm\nHost alias1\n  HostName n1\nHost alias2\n  HostName %h-x\n"
        "Host *.cl.test\n  User canonuser\n  Port 2201\nHost gpu*\n  User gpuuser\n"
        "Match canonical host n1.cl.test\n  User matched\n",
        ["vm", "VM", "gpu1", "gpu2", "gpu3", "gpu1.cl.test", "alias1", "alias2", "10.1.2.3"],
    ),
    "always": (
        "CanonicalizeHostname always\nCanonicalDomains cl.test\n"
        "Host gpu2\n  ProxyJump vm\nHost *.cl.test\n  Port 2201\n",
        ["gpu2", "vm"],
    ),
    "max dots": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nCanonicalizeMaxDots 0\n"
        "Host *.cl.test\n  Port 2201\n",
        ["vm", "two.sub"],
    ),
    "none ends the list": (
        "CanonicalizeHostname yes\nCanonicalDomains none\nHost *.cl.test\n  Port 2201\n",
        ["vm"],
    ),
    "a second pass under HostName": (
        "CanonicalizeHostname yes\nHost a1\n  HostName box\nHost box\n  Port 2301\n",
        ["a1"],
    ),
    "originalhost is the name given": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\n"
        "Match canonical originalhost gpu1\n  Port 2400\nHost *.cl.test\n  Port 2201\n",
        ["gpu1", "gpu2"],
    ),
    "Match host sees HostName expanded, then the canonical name": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nHost n1 n2\n  HostName x-%h\n"
        "Match !canonical host x-n1\n  Port 2402\nMatch !canonical host x-%h\n  User wrong\n"
        "Match canonical host x-n1.cl.test\n  User canonmatched\n"
        "Match canonical originalhost n2 host x-n2\n  User fellback\n",
        ["n1", "n2"],
    ),
    "HostName's %% expanded once": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nHost a1\n  HostName v%%h\n"
        "Match canonical host v%h\n  Port 2403\n",
        ["a1"],
    ),
    "ProxyJump none: canonicalized from OpenSSH 9.4 on, not before": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nHost vm\n  ProxyJump none\n"
        "Host *.cl.test\n  Port 2201\n",
        ["vm", "gpu1"],
    ),
    "not asked for": ("CanonicalDomains cl.test\nHost *.cl.test\n  Port 2201\n", ["vm"]),
    "CNAMEs, by ssh -G": (
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\n"
        "CanonicalizePermittedCNAMEs *.cl.test:*.cl.test\nHost n1.cl.test\n  Port 2222\n",
        ["web", "vm"],
    ),
}


@pytest.fixture(scope="module")
def in_dns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    with dns.resolver(
        tmp_path_factory.mktemp("dns"), NAMES, {"web.cl.test": "n1.cl.test"}
    ) as prefix:
        yield prefix


def _by_ssh(prefix: list[str], config: Path, alias: str) -> list[object]:
    argv = [*prefix, "ssh", "-G", "-F", str(config), alias]
    shown = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    options = dict(line.split(" ", 1) for line in shown.splitlines() if " " in line)
    jump = None if options.get("proxyjump", "none") == "none" else options["proxyjump"]
    return [options["hostname"], int(options["port"]), options["user"], jump]


def _ours(prefix: list[str], config: Path, alias: str) -> object:
    argv = [*prefix, sys.executable, "-c", _OURS, alias, str(config)]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize(
    ("case", "alias"),
    [(case, alias) for case, (_, aliases) in CONFIGS.items() for alias in aliases],
)
def test_a_host_resolves_as_ssh_resolves_it(
    tmp_path: Path, in_dns: list[str], case: str, alias: str
) -> None:
    config = tmp_path / "config"
    config.write_text(CONFIGS[case][0])
    assert _ours(in_dns, config, alias) == _by_ssh(in_dns, config, alias)


def test_the_alias_is_not_written_over_hostname(tmp_path: Path, in_dns: list[str]) -> None:
    config = tmp_path / "config"
    config.write_text(CONFIGS["yes"][0])
    assert _ours(in_dns, config, "alias1")[:2] == ["n1.cl.test", 2201]  # type: ignore[index]
    assert _ours(in_dns, config, "gpu2")[:2] == ["gpu2", 22]  # type: ignore[index]


def test_match_host_sees_hostname_expanded(tmp_path: Path, in_dns: list[str]) -> None:
    """paramiko matched ``Match host`` against ``HostName x-%h`` as written, in the first
    pass, and expanded ``%%`` again before the second (``v%%h``: ``va1``)."""
    config = tmp_path / "config"
    case = CONFIGS["Match host sees HostName expanded, then the canonical name"]
    config.write_text(case[0])
    assert _ours(in_dns, config, "n1") == ["x-n1.cl.test", 2402, "canonmatched", None]
    assert _ours(in_dns, config, "n2")[1:3] == [22, "fellback"]  # type: ignore[index]
    config.write_text(CONFIGS["HostName's %% expanded once"][0])
    assert _ours(in_dns, config, "a1")[:2] == ["v%h", 2403]  # type: ignore[index]


def test_fallback_local_no_fails_as_ssh_fails(tmp_path: Path, in_dns: list[str]) -> None:
    config = tmp_path / "config"
    config.write_text(
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nCanonicalizeFallbackLocal no\n"
    )
    argv = [*in_dns, "ssh", "-G", "-F", str(config), "missing"]
    by_ssh = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert by_ssh.returncode == 255 and 'Could not resolve host "missing"' in by_ssh.stderr
    assert _ours(in_dns, config, "missing") == (
        "SSH config, host missing: could not resolve host 'missing' in CanonicalDomains "
        "cl.test, and CanonicalizeFallbackLocal is no (ssh fails there too)"
    )
    assert _ours(in_dns, config, "vm")[0] == "vm.cl.test"  # type: ignore[index]


def test_every_host_is_looked_up_at_once(tmp_path: Path) -> None:
    """Canonicalizing asks the DNS for each host: at once, as one ssh per host would,
    and once. The server answers no query before every host's name was asked; looked
    up one after another, the first lookup timed out and that host kept its short name
    (and 64 hosts took 64 times the resolver's answer, or its timeout). The paramiko
    client's check asked for every name again, one after another."""
    names = {f"h{index}.cl.test": f"127.0.0.{20 + index}" for index in range(8)}
    config = tmp_path / "config"
    config.write_text("CanonicalizeHostname yes\nCanonicalDomains cl.test\n")
    aliases = [name.split(".")[0] for name in names]
    with dnsgate.gathering_resolver(tmp_path, names, timeout_s=5) as (prefix, server):
        argv = [*prefix, sys.executable, "-c", _CHECKED, str(config), *aliases]
        said = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(said.stdout) == list(names)
    assert server.most_held == len(names)
    assert server.asked == dict.fromkeys(names, 1)


def test_a_jump_host_is_looked_up_once_for_every_target_behind_it(tmp_path: Path) -> None:
    """The paramiko client's check resolves each ProxyJump host once: for every target
    behind it, it was once per target, a DNS query each where the config canonicalizes
    (and four times the check's CPU, 256 targets)."""
    config = tmp_path / "config"
    config.write_text(
        "CanonicalizeHostname yes\nCanonicalDomains cl.test\nHost node*\n  ProxyJump bastion\n"
    )
    names = {"bastion.cl.test": "127.0.0.30"}
    with dnsgate.gathering_resolver(tmp_path, names, timeout_s=5) as (prefix, server):
        argv = [*prefix, sys.executable, "-c", _CHECKED, str(config)]
        argv += [f"node{index}" for index in range(8)]
        subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert server.asked == {"bastion.cl.test": 1}
