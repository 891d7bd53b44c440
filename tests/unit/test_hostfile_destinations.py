"""``host:``, ``addr:``, ``master_addr:`` and ``--master-addr`` as ssh, URLs and torchrun write
them (``root@node0:22222``, ``[::1]``, ``10.0.0.1:29500``): refused as the file is read,
one line with the keys to write; IPv6 addresses (``::1``, ``fe80::1%eth0``) are taken."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostfile import parse_inventory
from clusterlaunch.core.hostnames import master_address_problem

PATH = "hosts.yaml"


def refusal(text: str) -> str:
    with pytest.raises(HostsFileError) as info:
        parse_inventory(textwrap.dedent(text), PATH)
    return str(info.value)


def with_host(host: str) -> str:
    return f"hosts:\n  - host: {host}\n    gpus: 1\n"


@pytest.mark.parametrize(
    ("host", "fix"),
    [
        ("'node0:22222'", "'node0:22222' has a port in it; write host: 'node0' and port: 22222"),
        ("127.0.0.1:2222", "write host: '127.0.0.1' and port: 2222"),
        (
            "root@node0:22222",
            "has a user and a port in it; write host: 'node0', user: 'root' and port: 22222",
        ),
        ("ssh://root@node0:22222", "is a URL; write host: 'node0', user: 'root' and port: 22222"),
        ("ssh://node0", "is a URL; write host: 'node0'"),
        ("alice@gpu1", "has a user in it; write host: 'gpu1' and user: 'alice'"),
        ("'node[0-1]@x'", "a host expression holds no user: write the hosts in host:"),
        (
            "'[::1]'",
            "has brackets, which only a URL puts around an IPv6 address; write host: '::1'",
        ),
        ("'[::1]:22222'", "write host: '::1' and port: 22222"),
        ("'node[0-1]:22'", "'node0:22' has a port in it; write host: 'node0' and port: 22"),
    ],
)
def test_a_destination_form_is_refused_with_the_keys_to_write(host: str, fix: str) -> None:
    message = refusal(with_host(host))
    assert message.startswith(f"{PATH}:2: hosts[0].host: "), message
    assert fix in message, message
    assert "user: 'node[0-1]'" not in message and "user: 'ssh://" not in message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (with_host("'node1:x'"), "2: hosts[0].host: 'node1:x'"),
        (with_host("'node1:'"), "2: hosts[0].host: 'node1:'"),
        (with_host("'gpu[1-2]:a'"), "2: hosts[0].host: 'gpu1:a'"),
        (with_host("node1") + "    addr: 'a:b:c'\n", "4: hosts[0].addr: 'a:b:c'"),
        ("master_addr: 'n:x'\n" + with_host("node1"), "1: master_addr: 'n:x'"),
    ],
)
def test_a_stray_colon_is_refused_as_the_file_is_read(text: str, where: str) -> None:
    """``host: "node1:x"`` planned a job whose master was ``node1:x:AUTO``."""
    assert (
        refusal(text)
        == f"{PATH}:{where} contains ':' but is no IPv6 address; a host name holds no ':'"
    )


@pytest.mark.parametrize("host", ["'::1'", "'fe80::1%eth0'", "'2001:db8::7'", "node0", "gpu[1-2]"])
def test_ipv6_addresses_and_names_stay_accepted(host: str) -> None:
    inventory = parse_inventory(with_host(host), PATH)
    assert inventory.hosts[0].host == host.strip("'").replace("[1-2]", "1")


@pytest.mark.parametrize(
    ("key", "value", "fix"),
    [
        ("master_addr", "127.0.0.11:29500", "write master_addr: 127.0.0.11 and master_port: 29500"),
        ("master_addr", "[::1]", "has brackets; write master_addr: ::1 without brackets"),
        ("master_addr", "[::1]:29500", "write master_addr: ::1 and master_port: 29500"),
    ],
)
def test_master_addr_holds_an_address_alone(key: str, value: str, fix: str) -> None:
    message = refusal(f'{key}: "{value}"\n' + with_host("node0"))
    assert message.startswith(f"{PATH}:1: {key}: {value!r} ") and message.endswith(fix), message


def test_addr_holds_an_address_alone() -> None:
    message = refusal(with_host("node0") + '    addr: "10.0.0.1:29500"\n')
    assert message.endswith(
        "hosts[0].addr: '10.0.0.1:29500' has a port in it; "
        "write addr: 10.0.0.1 and master_port: 29500"
    ), message


def test_unbracketed_ipv6_master_addr_is_taken() -> None:
    assert parse_inventory("master_addr: ::1\n" + with_host("node0"), PATH).master_addr == "::1"


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        ("127.0.0.11:29500", "write --master-addr 127.0.0.11 and --master-port 29500"),
        ("[::1]", "write --master-addr ::1 without brackets"),
    ],
)
def test_the_flag_holds_an_address_alone(
    tmp_path: object, capsys: pytest.CaptureFixture[str], value: str, fix: str
) -> None:
    from pathlib import Path

    hosts = Path(str(tmp_path)) / "h.yaml"
    hosts.write_text(with_host("node0"))
    argv = ["run", "--dry-run", "--master-addr", value, str(hosts), "train.py"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("clusterlaunch: error: --master-addr ") and fix in err, err


# An IPv6 zone in the master address: torchrun 2.13 refuses it on every node with a
# traceback ("The hostname of the rendezvous endpoint 'fe80::1%eth0:40979' must be a
# dot-separated list of labels ..."), after the preflight passed.
ZONE_FIX = (
    "has an IPv6 zone (%eth0), which torchrun refuses in its master address; set {key} to an "
    "address of node 0 without a zone (a global or unique-local one)"
)


def test_a_zone_in_master_addr_is_refused_as_the_file_is_read() -> None:
    message = refusal("master_addr: 'fe80::1%eth0'\n" + with_host("node0"))
    assert message == f"{PATH}:1: master_addr: 'fe80::1%eth0' " + ZONE_FIX.format(
        key="master_addr:"
    )


def _dry_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *flags: str
) -> tuple[int, str, str]:
    hosts = tmp_path / "h.yaml"
    hosts.write_text(text)
    config = tmp_path / "ssh_config"
    config.write_text("Host viaconfig\n    HostName fe80::7%%eth0\n")
    argv = ["run", "--dry-run", "--ssh-config", str(config), *flags, str(hosts), "train.py"]
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("text", "flags", "where"),
    [
        (
            with_host("node0"),
            ("--master-addr", "fe80::1%eth0"),
            "--master-addr 'fe80::1%eth0': " + ZONE_FIX.format(key="--master-addr"),
        ),
        (
            with_host("'fe80::1%eth0'") + with_host("node1")[7:],
            (),
            "h.yaml:2: hosts[0].host: node 0's address 'fe80::1%eth0' "
            + ZONE_FIX.format(key="master_addr: (or --master-addr)"),
        ),
        (
            with_host("node0") + "    addr: 'fe80::1%eth0'\n",
            (),
            "h.yaml:2: hosts[0].addr: node 0's address 'fe80::1%eth0' "
            + ZONE_FIX.format(key="master_addr: (or --master-addr)"),
        ),
        (
            with_host("viaconfig"),
            (),
            "h.yaml:2: hosts[0].host: node 0's address 'fe80::7%eth0' (its HostName in your "
            "SSH config) " + ZONE_FIX.format(key="master_addr: (or --master-addr)"),
        ),
    ],
)
def test_a_zone_in_the_master_address_is_one_line_and_nothing_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    flags: tuple[str, ...],
    where: str,
) -> None:
    code, out, err = _dry_run(tmp_path, capsys, text, *flags)
    assert (code, out) == (2, ""), err
    assert err.endswith(f"{where}\n") and err.count("\n") == 1, err


def test_a_zone_is_fine_where_no_master_is_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A later node's ``addr:`` is not the master's, and ``exec`` plans none."""
    later = with_host("node0") + with_host("node1")[7:] + "    addr: 'fe80::2%eth0'\n"
    assert _dry_run(tmp_path, capsys, later)[0] == 0
    hosts = tmp_path / "zoned.yaml"
    hosts.write_text(with_host("'fe80::1%eth0'") + with_host("node1")[7:])
    assert main(["exec", "--dry-run", str(hosts), "--", "true"]) == 0


@pytest.mark.torch
def test_the_master_address_is_refused_where_torchrun_refuses_it() -> None:
    """torchrun's own parse of the endpoint it builds from ``--master-addr`` is the truth
    (one interpreter for all: torch's import takes a second or two)."""
    import json
    import subprocess
    import sys

    values = ["fe80::1%eth0", "node+1", "fd42:6::10", "node_0.example", "gpü-1", "10.0.0.1", "a~b"]
    probe = (
        "import json, sys\n"
        "from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint\n"
        "def takes(value):\n    try:\n        parse_rendezvous_endpoint(value + ':29500', 0)\n"
        "    except ValueError:\n        return False\n    return True\n"
        "print(json.dumps([takes(value) for value in sys.argv[1:]]))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe, *values], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ours = [master_address_problem(value, "--master-addr") is None for value in values]
    assert dict(zip(values, ours, strict=True)) == dict(
        zip(values, json.loads(done.stdout), strict=True)
    )
