"""Hosts file parsing: clusterlaunch YAML and MPI/DeepSpeed hostfiles, and every bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from clusterlaunch.core.errors import HostsFileError, UsageError
from clusterlaunch.core.hostfile import load_inventory, parse_inventory
from clusterlaunch.core.hostranges import HostRangeError, expand_hosts, fold_hosts
from clusterlaunch.core.model import HostSpec, Inventory
from clusterlaunch.core.mpihostfile import looks_like_yaml

PATH = "hosts.yaml"


def parse(text: str, path: str = PATH) -> Inventory:
    return parse_inventory(textwrap.dedent(text), path)


def error_of(text: str, path: str = PATH) -> HostsFileError:
    with pytest.raises(HostsFileError) as info:
        parse(text, path)
    return info.value


# -------------------------------------------------------------------------------------- YAML format

FULL_YAML = """\
master_port: 29500
master_addr: 10.0.0.1
defaults:
  user: alice
  port: 2222
  python: /opt/venv/bin/python
  workdir: /srv/job
  setup: source /opt/env.sh
  env:
    NCCL_DEBUG: INFO
    SHARED: from-defaults
  gpus: 2
hosts:
  - host: gpu-a
    gpus: 4
    devices: [3, 2, 1, 0]
    env:
      SHARED: from-host
      EXTRA: "1"
    addr: 192.168.1.10
  - host: gpu-b
    user: bob
    port: 22
    python: python3.11
    workdir: /home/bob/job
    setup: module load cuda
  - {host: "node[1-2]", gpus: 1, env: {NUM: 7}}
"""


def test_full_yaml_inventory_by_equality() -> None:
    inventory = parse_inventory(FULL_YAML, PATH)
    shared = {"user": "alice", "port": 2222, "python": "/opt/venv/bin/python"}
    assert inventory == Inventory(
        path=PATH,
        master_port=29500,
        master_addr="10.0.0.1",
        hosts=(
            HostSpec(
                host="gpu-a",
                gpus=4,
                workdir="/srv/job",
                setup="source /opt/env.sh",
                env={"NCCL_DEBUG": "INFO", "SHARED": "from-host", "EXTRA": "1"},
                devices=(3, 2, 1, 0),
                addr="192.168.1.10",
                line=14,
                entry=0,
                **shared,  # type: ignore[arg-type]
            ),
            HostSpec(
                host="gpu-b",
                gpus=2,
                user="bob",
                port=22,
                python="python3.11",
                workdir="/home/bob/job",
                setup="module load cuda",
                env={"NCCL_DEBUG": "INFO", "SHARED": "from-defaults"},
                line=21,
                entry=1,
            ),
            *(
                HostSpec(
                    host=name,
                    gpus=1,
                    workdir="/srv/job",
                    setup="source /opt/env.sh",
                    env={"NCCL_DEBUG": "INFO", "SHARED": "from-defaults", "NUM": "7"},
                    line=27,
                    entry=2,
                    **shared,  # type: ignore[arg-type]
                )
                for name in ("node1", "node2")
            ),
        ),
    )


def test_host_env_merges_over_defaults_env_in_order() -> None:
    inventory = parse_inventory(FULL_YAML, PATH)
    # Defaults first; a host value replaces the default but the default's position stays.
    assert list(inventory.hosts[0].env.items()) == [
        ("NCCL_DEBUG", "INFO"),
        ("SHARED", "from-host"),
        ("EXTRA", "1"),
    ]


def test_minimal_yaml_gets_defaults() -> None:
    inventory = parse("""\
        hosts:
          - {host: gpu-a, gpus: 8}
        """)
    assert inventory == Inventory(
        path=PATH, hosts=(HostSpec(host="gpu-a", gpus=8, line=2, entry=0),)
    )
    spec = inventory.hosts[0]
    assert spec.python is None  # unset: the planner decides (python3, or ours for localhost)
    assert spec.env == {}
    assert spec.devices is None
    assert inventory.master_port is None


def test_gpus_from_defaults_and_string_numbers() -> None:
    inventory = parse("""\
        defaults:
          gpus: "3"
        hosts:
          - host: a
          - host: b
            gpus: 1
            port: "2200"
            devices: ["1"]
        """)
    assert inventory.hosts == (
        HostSpec(host="a", gpus=3, line=4, entry=0),
        HostSpec(host="b", gpus=1, port=2200, devices=(1,), line=5, entry=1),
    )


def test_master_port_auto_means_none() -> None:
    inventory = parse("""\
        master_port: auto
        hosts:
          - {host: a, gpus: 1}
        """)
    assert inventory.master_port is None


@pytest.mark.parametrize("port", [1, 29500, 65535])
def test_master_port_limits_accepted(port: int) -> None:
    inventory = parse(f"master_port: {port}\nhosts:\n  - {{host: a, gpus: 1}}\n")
    assert inventory.master_port == port


def test_one_name_on_two_ports_is_refused_as_the_file_is_read() -> None:
    """Connections are kept by the name: both entries ran on the last port's sshd."""
    error = error_of("""\
        hosts:
          - {host: "::1", gpus: 1, port: 23010}
          - {host: "::1", gpus: 1, port: 23011}
        """)
    assert str(error) == (
        "hosts.yaml:3: host: ::1 (port: 23011) is also listed at line 2 (port: 23010), and "
        "clusterlaunch keeps one connection per host name; give each entry its own name: in "
        "your SSH config (Host c1 / HostName ::1 / Port 23011), then host: c1 here (or, if "
        "they are one machine, list it once and raise its gpus)"
    )


@pytest.mark.parametrize(
    "second, shown, config",
    [
        ("{host: a, gpus: 1, user: bob}", "(user: bob) is also listed at line 2 (user: alice)",
         "(Host c1 / HostName a / User bob)"),
        ("{host: a, gpus: 1, user: alice, port: 2202}", "(port: 2202) is also listed at line 2 "
         "(no port)", "(Host c1 / HostName a / Port 2202)"),
        ("{host: 'a,b', gpus: 1, port: 2202, user: bob}", "(port: 2202, user: bob) is also "
         "listed at line 2 (no port, user: alice)",
         "(Host c1 / HostName a / Port 2202 / User bob)"),
    ],
)  # fmt: skip
def test_one_name_with_another_user_or_port_is_refused(
    second: str, shown: str, config: str
) -> None:
    error = error_of(f"hosts:\n  - {{host: a, gpus: 1, user: alice}}\n  - {second}\n")
    assert (error.line, error.field_name) == (3, "host")
    assert error.problem.startswith(f"a {shown}, and clusterlaunch keeps one connection"), error
    assert config in error.problem


def test_two_localhost_entries_are_one_machine_whatever_their_port() -> None:
    error = error_of(
        "hosts:\n  - {host: localhost, gpus: 1}\n  - {host: localhost, gpus: 1, port: 2}\n"
    )
    assert error.problem == (
        "localhost is listed twice (also at line 2); list each host once and raise its gpus instead"
    )


def test_env_integer_value_is_stringified() -> None:
    inventory = parse("""\
        hosts:
          - {host: a, gpus: 1, env: {OMP_NUM_THREADS: 4, EMPTY: ""}}
        """)
    assert inventory.hosts[0].env == {"OMP_NUM_THREADS": "4", "EMPTY": ""}


def test_localhost_is_local() -> None:
    inventory = parse("hosts:\n  - {host: localhost, gpus: 2}\n")
    assert inventory.hosts[0].is_local
    assert not parse("hosts:\n  - {host: gpu-a, gpus: 2}\n").hosts[0].is_local


def test_block_and_flow_entries_record_their_own_line() -> None:
    inventory = parse("""\
        # a comment

        hosts:

          - host: a
            gpus: 1
          # between
          - {host: b, gpus: 1}
          -
            host: c
            gpus: 1
        """)
    assert [(h.host, h.line) for h in inventory.hosts] == [("a", 5), ("b", 8), ("c", 10)]


# -------------------------------------------------------------------------------------- host ranges


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[1-2,4]", ["gpu1", "gpu2", "gpu4"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("gpu[9-10]", ["gpu9", "gpu10"]),
        ("10.0.0.1", ["10.0.0.1"]),
        ("plain-host", ["plain-host"]),
    ],
)
def test_expand_hosts(pattern: str, expected: list[str]) -> None:
    assert expand_hosts(pattern) == expected


def test_fold_hosts() -> None:
    assert fold_hosts(["gpu1", "gpu2", "gpu3"]) == "gpu[1-3]"


@pytest.mark.parametrize("pattern", ["gpu[1-", "gpu]1[", "gpu[a-b]"])
def test_bad_host_range(pattern: str) -> None:
    with pytest.raises(HostRangeError, match="bad host range"):
        expand_hosts(pattern)


def test_ranges_expand_in_order_in_yaml() -> None:
    inventory = parse("""\
        defaults:
          gpus: 2
        hosts:
          - host: head
          - host: rack[1-2]-n[1-2]
            user: ops
          - {host: "gpu[1-2,4]", gpus: 1}
        """)
    assert [(h.host, h.gpus, h.user, h.line) for h in inventory.hosts] == [
        ("head", 2, None, 4),
        ("rack1-n1", 2, "ops", 5),
        ("rack1-n2", 2, "ops", 5),
        ("rack2-n1", 2, "ops", 5),
        ("rack2-n2", 2, "ops", 5),
        ("gpu1", 1, None, 7),
        ("gpu2", 1, None, 7),
        ("gpu4", 1, None, 7),
    ]


def test_single_element_range_may_have_addr() -> None:
    inventory = parse("hosts:\n  - {host: 'gpu[1]', gpus: 1, addr: 10.0.0.1}\n")
    assert inventory.hosts == (HostSpec(host="gpu1", gpus=1, addr="10.0.0.1", line=2, entry=0),)


# --------------------------------------------------------------------------------------- MPI format

MPI_TEXT = """\
# DeepSpeed / OpenMPI hostfile

gpu-a slots=4
gpu-b slots=2 max_slots=8   # trailing comment
   gpu-c
node[01-02] slots=1
  # indented comment
rack[1-2]-n[1-2] max_slots=3 slots=2
"""


def test_mpi_hostfile_by_equality() -> None:
    inventory = parse_inventory(MPI_TEXT, "hostfile")
    assert inventory == Inventory(
        path="hostfile",
        hosts=(
            HostSpec(host="gpu-a", gpus=4, line=3),
            HostSpec(host="gpu-b", gpus=2, line=4),
            HostSpec(host="gpu-c", gpus=1, line=5),
            HostSpec(host="node01", gpus=1, line=6),
            HostSpec(host="node02", gpus=1, line=6),
            HostSpec(host="rack1-n1", gpus=2, line=8),
            HostSpec(host="rack1-n2", gpus=2, line=8),
            HostSpec(host="rack2-n1", gpus=2, line=8),
            HostSpec(host="rack2-n2", gpus=2, line=8),
        ),
        mpi=True,
    )


@pytest.mark.parametrize(
    ("text", "is_mpi"),
    [
        (MPI_TEXT, True),
        ("gpu-a\n", True),
        ("10.0.0.1 slots=8\n", True),
        ("gpu-a slots=2 foo=1\n", True),
        (FULL_YAML, False),
        ("hosts:\n  - {host: a, gpus: 1}\n", False),
        ("", False),
        ("# just a comment\n\n", False),
        ("gpu03 slots 8\n", True),  # a typo is still a hostfile, and its error says so
        ("fe80::1 slots=2\n", True),
        ("gpu1:4\n", True),  # Horovod's form: refused as a hostfile line, with the fix
        ("\ufeffgpu1 slots=2\n", True),
        ("\ufeffhosts:\n  - {host: a, gpus: 1}\n", False),
        ("# c\nhosts :\n", False),
        ("---\nhosts: []\n", False),
        ("{hosts: [{host: a, gpus: 1}]}\n", False),
        ("- host: a\n", False),
    ],
)
def test_format_detection(text: str, is_mpi: bool) -> None:
    assert looks_like_yaml(text) is not is_mpi


def test_mpi_single_host_defaults_to_one_slot() -> None:
    assert parse_inventory("localhost\n", "hf").hosts == (
        HostSpec(host="localhost", gpus=1, line=1),
    )


# ----------------------------------------------------------------------------------- load_inventory


def test_load_inventory_reads_file(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text(FULL_YAML, encoding="utf-8")
    assert load_inventory(str(path)) == parse_inventory(FULL_YAML, str(path))


def test_load_inventory_mpi_file(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(MPI_TEXT, encoding="utf-8")
    assert load_inventory(str(path)).hosts[0] == HostSpec(host="gpu-a", gpus=4, line=3)


def test_load_inventory_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    with pytest.raises(HostsFileError) as info:
        load_inventory(path)
    assert info.value.line is None
    assert str(info.value) == f"{path}: no such file; pass the path of a hosts file"


def test_load_inventory_directory(tmp_path: Path) -> None:
    with pytest.raises(HostsFileError, match="cannot read it") as info:
        load_inventory(str(tmp_path))
    assert str(info.value).startswith(f"{tmp_path}: cannot read it: ")


def test_load_inventory_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"hosts:\n  - {host: caf\xe9, gpus: 1}\n")
    with pytest.raises(HostsFileError, match=r"latin1.yaml:2: not UTF-8 text \(byte 0xe9\)"):
        load_inventory(str(path))


# ---------------------------------------------------------------------------------------- bad input

# (name, text, line, field, fragment of the problem that tells the fix)
BAD_YAML = [
    (
        "syntax-flow",
        "hosts:\n  - {host: a, gpus: 1\n",
        3,
        "",
        "YAML syntax error: did not find expected ','",
    ),
    ("syntax-indent", "hosts:\n  - host: a\n   gpus: 1\n", 3, "", "YAML syntax error"),
    ("syntax-tab", "hosts:\n\t- host: a\n", 2, "", "YAML syntax error: found character '\\t'"),
    ("not-a-mapping", "- {host: a, gpus: 1}\n", 1, "", "expected a mapping with a hosts: list"),
    ("missing-hosts", "master_port: 29500\n", 1, "hosts", "no hosts; add a list like"),
    ("empty-hosts", "master_port: 1\nhosts: []\n", 2, "hosts", "no hosts; add a list like"),
    ("null-hosts", "master_port: 1\nhosts:\n", 2, "hosts", "no hosts"),
    ("hosts-mapping", "hosts:\n  host: a\n  gpus: 1\n", 1, "hosts", "must be a list of hosts"),
    ("hosts-string", "master_port: 1\nhosts: gpu-a\n", 2, "hosts", "must be a list of hosts"),
    # A scalar entry has no line of its own: its list item's line is given.
    (
        "entry-not-mapping",
        "hosts:\n  - {host: a, gpus: 1}\n  - gpu-b\n",
        3,
        "hosts[1]",
        "must be a mapping like {host: gpu-a, gpus: 4}, got 'gpu-b'",
    ),
    (
        "entries-not-mappings",
        "hosts:\n  - node0\n  - node1\n",
        2,
        "hosts[0]",
        "must be a mapping like {host: gpu-a, gpus: 4}, got 'node0'",
    ),
    (
        "entry-empty",
        "hosts:\n  - host: node0\n    gpus: 1\n  -\n",
        4,
        "hosts[1]",
        "must be a mapping like {host: gpu-a, gpus: 4}, got an empty item",
    ),
    (
        "unknown-top",
        "hots:\n  - {host: a, gpus: 1}\n",
        1,
        "hots",
        "unknown key (did you mean 'hosts'?); "
        "allowed here: master_port, master_addr, ssh_client, defaults, hosts",
    ),
    (
        "unknown-defaults",
        "defaults:\n  gpu: 2\nhosts:\n  - {host: a, gpus: 1}\n",
        2,
        "defaults.gpu",
        "unknown key (did you mean 'gpus'?)",
    ),
    (
        "devices-in-defaults",
        "defaults:\n  devices: [0]\nhosts:\n  - {host: a, gpus: 1}\n",
        2,
        "defaults.devices",
        "unknown key; allowed here: user, port, python, workdir, setup, env, env_file, gpus, "
        "accelerator",
    ),
    (
        "unknown-host-key",
        "hosts:\n  - host: a\n    gpus: 1\n  - host: b\n    gpu: 2\n",
        5,
        "hosts[1].gpu",
        "unknown key (did you mean 'gpus'?)",
    ),
    (
        "unknown-host-key-no-hint",
        "hosts:\n  - host: a\n    gpus: 1\n    zzz: 2\n",
        4,
        "hosts[0].zzz",
        "unknown key; allowed here: host, gpus,",
    ),
    (
        "defaults-not-mapping",
        "defaults: x\nhosts:\n  - {host: a, gpus: 1}\n",
        1,
        "defaults",
        "must be a mapping",
    ),
    (
        "missing-host",
        "hosts:\n  - {host: a, gpus: 1}\n  - gpus: 2\n",
        3,
        "hosts[1].host",
        "missing; give the SSH destination",
    ),
    (
        "host-with-space",
        "hosts:\n  - host: 'a b'\n    gpus: 1\n",
        2,
        "hosts[0].host",
        "'a b' contains ' ', which OpenSSH refuses",
    ),
    (
        "host-empty",
        "hosts:\n  - host: ''\n    gpus: 1\n",
        2,
        "hosts[0].host",
        "must be a host name",
    ),
    (
        "missing-gpus",
        "hosts:\n  - host: a\n",
        2,
        "hosts[0].gpus",
        "missing; give the number of processes, e.g. gpus: 4",
    ),
    (
        "gpus-word",
        "hosts:\n  - host: a\n    gpus: four\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got 'four'",
    ),
    (
        "gpus-float",
        "hosts:\n  - host: a\n    gpus: 2.5\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got 2.5",
    ),
    (
        "gpus-zero",
        "hosts:\n  - host: a\n    gpus: 0\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got 0",
    ),
    (
        "gpus-negative",
        "hosts:\n  - host: a\n    gpus: -2\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got -2",
    ),
    (
        "gpus-bool",
        "hosts:\n  - host: a\n    gpus: true\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got true, which YAML reads as True",
    ),
    (
        "gpus-yes",  # it said "got True": not what was written
        "hosts:\n  - host: a\n    gpus: yes\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer up to 1,024, got yes, which YAML reads as True",
    ),
    (
        "host-empty",  # it said "got None"
        "hosts:\n  - host:\n    gpus: 1\n",
        2,
        "hosts[0].host",
        "must be a host name, got nothing (it is empty)",
    ),
    (
        "second-document",  # it said "but found another document"
        "hosts:\n  - {host: a, gpus: 1}\n---\nhosts: []\n",
        3,
        "",
        "YAML syntax error: a second document (---); a hosts file is one YAML document",
    ),
    (
        "devices-past-any-host",  # 999999999999999999999 was taken, and shown by the dry run
        "hosts:\n  - host: a\n    gpus: 1\n    devices: [999999999999999999999]\n",
        4,
        "hosts[0].devices",
        "must be a list of GPU indices (0 to 1,023), got [999999999999999999999]",
    ),
    (
        "gpus-list",
        "hosts:\n  - host: a\n    gpus: [1]\n",
        3,
        "hosts[0].gpus",
        "must be auto or a positive integer",
    ),
    (
        "defaults-gpus-zero",
        "defaults:\n  gpus: 0\nhosts:\n  - host: a\n",
        2,
        "defaults.gpus",
        "got 0",
    ),
    (
        "devices-too-many",
        "hosts:\n  - host: a\n    gpus: 2\n    devices: [0, 1, 2]\n",
        4,
        "hosts[0].devices",
        "has 3 entries but gpus is 2; they must match",
    ),
    (
        "devices-too-few",
        "hosts:\n  - host: a\n    gpus: 2\n    devices: [0]\n",
        4,
        "hosts[0].devices",
        "has 1 entries but gpus is 2",
    ),
    (
        "devices-duplicate",
        "hosts:\n  - host: a\n    gpus: 2\n    devices: [1, 1]\n",
        4,
        "hosts[0].devices",
        "lists a GPU twice: [1, 1]",
    ),
    (
        "devices-negative",
        "hosts:\n  - host: a\n    gpus: 2\n    devices: [-1, 0]\n",
        4,
        "hosts[0].devices",
        "must be a list of GPU indices (0 to 1,023), got [-1, 0]",
    ),
    (
        "devices-string",
        "hosts:\n  - host: a\n    gpus: 2\n    devices: '0,1'\n",
        4,
        "hosts[0].devices",
        "must be a list of GPU indices",
    ),
    (
        "devices-bool",
        "hosts:\n  - host: a\n    gpus: 1\n    devices: [true]\n",
        4,
        "hosts[0].devices",
        "must be a list of GPU indices",
    ),
    (
        "duplicate-host",
        "hosts:\n  - host: a\n    gpus: 1\n  - host: b\n    gpus: 1\n  - host: a\n    gpus: 2\n",
        6,
        "host",
        "a is listed twice (also at line 2); list each host once and raise its gpus instead",
    ),
    (
        "duplicate-host-same-port",
        "hosts:\n  - {host: a, gpus: 1, port: 22}\n  - {host: a, gpus: 1, port: 22}\n",
        3,
        "host",
        "a is listed twice (also at line 2)",
    ),
    (
        "duplicate-via-range",
        "hosts:\n  - {host: 'gpu[1-3]', gpus: 1}\n  - {host: gpu2, gpus: 1}\n",
        3,
        "host",
        "gpu2 is listed twice (also at line 2)",
    ),
    (
        "duplicate-yaml-key",
        "hosts:\n  - host: a\n    gpus: 1\n    host: b\n",
        4,
        "host",
        "duplicate key 'host' (first at line 2); keep one of them",
    ),
    (
        "duplicate-top-key",
        "master_port: 1\nhosts:\n  - {host: a, gpus: 1}\nmaster_port: 2\n",
        4,
        "master_port",
        "duplicate key 'master_port' (first at line 1)",
    ),
    (
        "duplicate-env-key",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      A: x\n      A: y\n",
        6,
        "A",
        "duplicate key 'A' (first at line 5)",
    ),
    (
        "master-port-zero",
        "master_port: 0\nhosts:\n  - {host: a, gpus: 1}\n",
        1,
        "master_port",
        "must be auto or a TCP port 1-65535, got 0",
    ),
    (
        "master-port-70000",
        "hosts:\n  - {host: a, gpus: 1}\nmaster_port: 70000\n",
        3,
        "master_port",
        "must be auto or a TCP port 1-65535, got 70000",
    ),
    (
        "master-port-abc",
        "master_port: abc\nhosts:\n  - {host: a, gpus: 1}\n",
        1,
        "master_port",
        "must be auto or a TCP port 1-65535, got 'abc'",
    ),
    (
        "master-addr-int",
        "master_addr: 5\nhosts:\n  - {host: a, gpus: 1}\n",
        1,
        "master_addr",
        "must be a non-empty string",
    ),
    (
        "port-70000",
        "hosts:\n  - host: a\n    gpus: 1\n    port: 70000\n",
        4,
        "hosts[0].port",
        "must be a TCP port 1-65535",
    ),
    (
        "defaults-port-word",
        "defaults:\n  port: x\nhosts:\n  - {host: a, gpus: 1}\n",
        2,
        "defaults.port",
        "got 'x'",
    ),
    (
        "user-empty",
        "hosts:\n  - host: a\n    gpus: 1\n    user: ''\n",
        4,
        "hosts[0].user",
        "must be a non-empty string",
    ),
    (
        "env-not-mapping",
        "hosts:\n  - host: a\n    gpus: 1\n    env: [A=1]\n",
        4,
        "hosts[0].env",
        "must be a mapping of NAME: value strings",
    ),
    (
        "defaults-env-string",
        "defaults:\n  env: A=1\nhosts:\n  - {host: a, gpus: 1}\n",
        2,
        "defaults.env",
        "must be a mapping",
    ),
    (
        "env-value-list",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      A: ok\n      B: [1, 2]\n",
        6,
        "hosts[0].env.B",
        "must be a string, and YAML reads this value as a list (not shown); write it in quotes",
    ),
    (
        "env-value-bool",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      B: yes\n",
        5,
        "hosts[0].env.B",
        'must be a string, got yes, which YAML reads as True; write it in quotes ("yes")',
    ),
    (
        "env-value-none",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      B:\n",
        5,
        "hosts[0].env.B",
        "must be a string, got nothing (the value is empty); write the value in quotes",
    ),
    (
        "env-value-float",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      B: 1.5\n",
        5,
        "hosts[0].env.B",
        "must be a string, and YAML reads this value as a number with a fraction or exponent",
    ),
    (
        "env-ssh-auth-sock",
        "defaults:\n  env:\n    SSH_AUTH_SOCK: /tmp/x\nhosts:\n  - {host: a, gpus: 1}\n",
        3,
        "defaults.env.SSH_AUTH_SOCK",
        "SSH_* variables are owned",
    ),
    (
        "env-cuda-visible-devices",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      CUDA_VISIBLE_DEVICES: '0'\n",
        5,
        "hosts[0].env.CUDA_VISIBLE_DEVICES",
        "set from each host's devices: list; use that instead",
    ),
    (
        "env-rank",
        "hosts:\n  - host: a\n    gpus: 1\n    env: {RANK: '0'}\n",
        4,
        "hosts[0].env.RANK",
        "set by torchrun",
    ),
    (
        "env-bash-func",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      'BASH_FUNC_x%%': '() { :; }'\n",
        5,
        "hosts[0].env.BASH_FUNC_x%%",
        "is not a valid variable name",
    ),
    (
        "env-bash-func-valid-name",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      BASH_FUNC_x: y\n",
        5,
        "hosts[0].env.BASH_FUNC_x",
        "BASH_FUNC_* variables are owned",
    ),
    (
        "env-leading-digit",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      1ABC: x\n",
        5,
        "hosts[0].env.1ABC",
        "'1ABC' is not a valid variable name",
    ),
    (
        "env-read-only",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      SHELLOPTS: x\n",
        5,
        "hosts[0].env.SHELLOPTS",
        "read-only",
    ),
    (
        "env-torch-elastic-identical",
        "hosts:\n  - host: a\n    gpus: 1\n    env:\n      TORCH_ELASTIC_WORKER_IDENTICAL: '1'\n",
        5,
        "hosts[0].env.TORCH_ELASTIC_WORKER_IDENTICAL",
        "breaks hosts with different process counts",
    ),
    (
        "python-with-equals",
        "hosts:\n  - host: a\n    gpus: 1\n    python: /opt/x=1/python\n",
        4,
        "hosts[0].python",
        "must be a path without '=' or newlines",
    ),
    (
        "defaults-python-with-equals",
        "defaults:\n  python: A=1 python\nhosts:\n  - host: a\n    gpus: 1\n",
        2,
        "defaults.python",
        "must be a path without '='",
    ),
    (
        "range-with-addr",
        "hosts:\n  - host: gpu[1-2]\n    gpus: 1\n    addr: 10.0.0.1\n",
        4,
        "hosts[0].addr",
        "cannot be combined with a host range",
    ),
    (
        "bad-range",
        "hosts:\n  - host: gpu[1-\n    gpus: 1\n",
        2,
        "hosts[0].host",
        "bad host range 'gpu[1-'",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_YAML],
)
def test_bad_yaml(text: str, line: int, field: str, fragment: str) -> None:
    error = error_of(text)
    assert isinstance(error, UsageError)
    assert (error.path, error.line, error.field_name) == (PATH, line, field)
    prefix = f"{PATH}:{line}: {field}: " if field else f"{PATH}:{line}: "
    assert str(error).startswith(prefix), str(error)
    assert fragment in error.problem, str(error)
    assert str(error) == prefix + error.problem
    assert "\n" not in str(error)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "  \n# c\n"])
def test_empty_file(text: str) -> None:
    error = error_of(text)
    assert (error.line, error.field_name) == (None, "hosts")
    assert str(error) == f"{PATH}: hosts: the file is empty; list your hosts under hosts:"


BAD_MPI = [
    (
        "unknown-option-with-hint",
        "# c\ngpu1 slots=2\ngpu2 slot=4\n",
        3,
        "",
        "unknown option 'slot' (did you mean 'slots'?)",
    ),
    ("unknown-option", "gpu1 cpus=2\n", 1, "", "unknown option 'cpus'"),
    (
        "slots-zero",
        "\ngpu1 slots=0\n",
        2,
        "slots",
        "must be a positive integer up to 1,024, got '0'",
    ),
    (
        "slots-word",
        "gpu1 slots=x\n",
        1,
        "slots",
        "must be a positive integer up to 1,024, got 'x'",
    ),
    (
        "duplicate",
        "gpu1\ngpu2\n\ngpu1 slots=3\n",
        4,
        "host",
        "gpu1 is listed twice (also at line 1)",
    ),
    ("bad-range", "gpu[1-\n", 1, "", "bad host range 'gpu[1-'"),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD_MPI],
)
def test_bad_mpi(text: str, line: int, field: str, fragment: str) -> None:
    error = error_of(text, "hostfile")
    assert (error.path, error.line, error.field_name) == ("hostfile", line, field)
    where = f"hostfile:{line}: {field}: " if field else f"hostfile:{line}: "
    assert str(error) == where + error.problem
    assert fragment in error.problem, str(error)


def test_error_without_line_or_field_format() -> None:
    error = HostsFileError("p.yaml", None, "", "problem")
    assert str(error) == "p.yaml: problem"
    assert str(HostsFileError("p.yaml", 3, "", "problem")) == "p.yaml:3: problem"
    assert str(HostsFileError("p.yaml", 3, "f", "problem")) == "p.yaml:3: f: problem"


# --------------------------------------------------------------------------------------- known bugs


def test_yaml_merge_key_may_be_overridden() -> None:
    inventory = parse("""\
        defaults: &base
          gpus: 2
        hosts:
          - {<<: *base, host: a, gpus: 4}
          - {<<: *base, host: b}
        """)
    assert [(h.host, h.gpus) for h in inventory.hosts] == [("a", 4), ("b", 2)]


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("hosts:\n  - {host: a, gpus: '²'}\n", PATH),
        ("hosts:\n  - {host: a, gpus: 1, port: '²'}\n", PATH),
        ("master_port: '²'\nhosts:\n  - {host: a, gpus: 1}\n", PATH),
        ("hosts:\n  - {host: a, gpus: 1, devices: ['¹']}\n", PATH),
        ("gpu1 slots=²\n", "hostfile"),
    ],
    ids=["gpus", "port", "master_port", "devices", "mpi-slots"],
)
def test_superscript_digits_are_a_hosts_file_error(text: str, path: str) -> None:
    with pytest.raises(HostsFileError):
        parse_inventory(text, path)


def test_empty_yaml_document_is_empty_file() -> None:
    error = error_of("---\n")
    assert (error.line, error.field_name) == (None, "hosts")


@pytest.mark.parametrize("client", ["openssh", "paramiko"])
def test_ssh_client_is_read(client: str) -> None:
    inventory = parse(f"ssh_client: {client}\nhosts:\n  - {{host: a, gpus: 1}}\n")
    assert inventory.ssh_client == client
    assert parse("hosts:\n  - {host: a, gpus: 1}\n").ssh_client is None


@pytest.mark.parametrize("value", ["ssh", "OpenSSH", "[openssh]", "1", "''"])
def test_a_bad_ssh_client_names_file_line_field_and_fix(value: str) -> None:
    with pytest.raises(HostsFileError) as caught:
        parse(f"hosts:\n  - {{host: a, gpus: 1}}\nssh_client: {value}\n")
    message = str(caught.value)
    assert message.startswith("hosts.yaml:3: ssh_client: must be paramiko or openssh, got ")
    assert message.endswith("; write ssh_client: paramiko or ssh_client: openssh")


def test_ssh_client_under_defaults_says_it_is_a_top_level_key() -> None:
    with pytest.raises(HostsFileError) as caught:
        parse("defaults:\n  ssh_client: openssh\nhosts:\n  - {host: a, gpus: 1}\n")
    assert str(caught.value) == (
        "hosts.yaml:2: defaults.ssh_client: unknown key "
        "(it is a top-level key: move it out to the top of the file); "
        "allowed here: user, port, python, workdir, setup, env, env_file, gpus, accelerator"
    )
