"""``--include``/``--exclude`` mean what they mean in DeepSpeed, on DeepSpeed's own test cases.

Ported from deepspeedai/DeepSpeed tests/unit/launcher/test_run.py
(``parse_resource_filter``/``parse_inclusion_exclusion``: a host's slots are
its GPU indices) and test_multinode_runner.py (the hosts and process counts a
filter leaves). clusterlaunch keeps a host's slots as its ``devices:``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.includes import override_gpus, parse_filter, select_hosts
from clusterlaunch.core.model import HostSpec, Inventory

Slots = dict[str, list[int]]


def pool(hosts: Slots) -> Inventory:
    """DeepSpeed's ``{host: [slots]}`` as an inventory (slots 0..N-1 are plain ``gpus: N``)."""
    specs = []
    for name, slots in hosts.items():
        plain = slots == list(range(len(slots)))
        specs.append(HostSpec(host=name, gpus=len(slots), devices=None if plain else tuple(slots)))
    return Inventory(path="hostfile", hosts=tuple(specs))


def slots_of(inventory: Inventory) -> Slots:
    return {
        spec.host: list(spec.devices) if spec.devices is not None else list(range(spec.gpus or 0))
        for spec in inventory.hosts
    }


def resource_filter(hosts: Slots, include: str = "", exclude: str = "") -> Slots:
    """DeepSpeed's ``parse_resource_filter(hosts, include_str, exclude_str)``, ours underneath."""
    return slots_of(select_hosts(pool(hosts), include or None, exclude or None))


def test_parser_mutual_exclusive() -> None:
    with pytest.raises(UsageError, match="cannot be combined"):
        resource_filter({"A": [0], "B": [0]}, include="A", exclude="B")


def test_parser_local() -> None:
    hosts = {"worker-0": [0, 1, 2, 3]}
    assert resource_filter(hosts) == hosts
    assert resource_filter(hosts, exclude="worker-0:1") == {"worker-0": [0, 2, 3]}
    assert resource_filter(hosts, exclude="worker-0:1,2") == {"worker-0": [0, 3]}
    assert resource_filter(hosts, include="worker-0:1") == {"worker-0": [1]}
    assert resource_filter(hosts, include="worker-0:1,1") == {"worker-0": [1]}
    assert resource_filter(hosts, include="worker-0:1@worker-0:0,1") == {"worker-0": [0, 1]}
    assert resource_filter(hosts, include="worker-0") == hosts
    # DeepSpeed returns {} for these; a job with no host is refused here.
    for exclude in ("worker-0", "worker-0:0,1,2,3"):
        with pytest.raises(UsageError, match="leaves no host to run on"):
            resource_filter(hosts, exclude=exclude)


def test_parser_multinode() -> None:
    hosts = {"worker-0": [0, 1, 2, 3], "worker-1": [0, 1, 2, 3]}
    assert resource_filter(hosts) == hosts
    assert resource_filter(hosts, include="worker-1:0,3") == {"worker-1": [0, 3]}
    assert resource_filter(hosts, exclude="worker-1") == {"worker-0": [0, 1, 2, 3]}
    assert resource_filter(hosts, exclude="worker-0:0,1@worker-1:3") == {
        "worker-0": [2, 3],
        "worker-1": [0, 1, 2],
    }


def test_parse_inclusion_exclusion() -> None:
    hosts = {"worker-0": [0, 1, 2, 3], "worker-1": [0, 1, 2, 3]}
    assert resource_filter(hosts, include="worker-0") == {"worker-0": [0, 1, 2, 3]}
    assert resource_filter(hosts, include="worker-0@worker-1:0,2") == {
        "worker-0": [0, 1, 2, 3],
        "worker-1": [0, 2],
    }
    assert resource_filter(hosts, include="worker-1:0,2") == {"worker-1": [0, 2]}
    assert resource_filter(hosts, exclude="worker-0:1") == {
        "worker-0": [0, 2, 3],
        "worker-1": [0, 1, 2, 3],
    }


def test_a_host_named_twice_has_its_slots_merged_and_sorted_as_deepspeed_does() -> None:
    """DeepSpeed since 0.15.2 (PR #6530, ``parse_node_config_list``) reads the filter into
    one slot list per host first: the entries of a host are merged, duplicates dropped and
    the slots sorted; a name without slots adds none to a host that has some. Before it,
    a later entry replaced an earlier one and the order given was kept."""
    hosts = {"worker-0": [0, 1, 2, 3], "worker-1": [0, 1, 2, 3]}
    assert resource_filter(hosts, include="worker-0:1@worker-0") == {"worker-0": [1]}
    assert resource_filter(hosts, include="worker-0:1@worker-0:2") == {"worker-0": [1, 2]}
    assert resource_filter(hosts, include="worker-1:2,0") == {"worker-1": [0, 2]}
    for exclude in ("worker-1:0@worker-1", "worker-1@worker-1:0"):
        assert resource_filter(hosts, exclude=exclude) == {
            "worker-0": [0, 1, 2, 3],
            "worker-1": [1, 2, 3],
        }
    assert parse_filter("w0@w1:2,0@w1:1", "--include") == {"w0": [], "w1": [0, 1, 2]}


@pytest.mark.parametrize("spec", ["worker-0:4", "worker-0:99", "worker-0:0,4"])
def test_parse_inclusion_exclusion_errors(spec: str) -> None:
    hosts = {"worker-0": [0, 1, 2, 3]}
    for flag in ("include", "exclude"):
        with pytest.raises(UsageError, match="worker-0 has no GPU"):
            resource_filter(hosts, **{flag: spec})
    with pytest.raises(UsageError, match="no host 'jeff'"):
        resource_filter(hosts, include="jeff")


def test_parser_errors() -> None:
    hosts = {"worker-0": [0, 1, 2, 3], "worker-1": [0, 1, 2, 3]}
    for flag in ("include", "exclude"):
        with pytest.raises(UsageError, match="no host 'jeff'"):
            resource_filter(hosts, **{flag: "jeff"})
        with pytest.raises(UsageError, match="worker-1 has no GPU 4"):
            resource_filter(hosts, **{flag: "worker-1:4"})
    with pytest.raises(UsageError, match="no host '5'"):
        resource_filter(hosts, exclude="worker-1@worker-0:1@5")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("worker-0:", "cannot read 'worker-0:'"),
        ("worker-0:1:2", "cannot read 'worker-0:1:2'"),
        ("worker-0:a", "'a' is not a GPU index"),
        ("worker-0:-1", "'-1' is not a GPU index"),
        ("@worker-0", "cannot read ''"),
        ("worker-[0-x]", "bad host range 'worker-[0-x]'"),
        ("w[0-99999]", "stands for 100,000 hosts"),
        ("w[1-3]!w[1-3]", "stands for no host"),
    ],
)
def test_malformed_filters(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match="--include") as info:
        parse_filter(text, "--include")
    assert fragment in str(info.value)


def test_slots_are_a_hosts_devices() -> None:
    # A host with devices: [2, 3] offers GPUs 2 and 3; --include picks among them.
    hosts = {"a": [2, 3], "b": [0, 1]}
    assert resource_filter(hosts, include="a:3@b") == {"a": [3], "b": [0, 1]}
    with pytest.raises(UsageError, match="a has no GPU 0 \\(its GPUs: 2,3\\)"):
        resource_filter(hosts, include="a:0")


def test_gpus_auto_hosts() -> None:
    auto = Inventory("h", (HostSpec(host="a", gpus=None), HostSpec(host="b", gpus=None)))
    chosen = select_hosts(auto, "a:0,2@b", None)
    assert [(s.host, s.gpus, s.devices) for s in chosen.hosts] == [
        ("a", 2, (0, 2)),
        ("b", None, None),  # still counted at launch
    ]
    assert [s.host for s in select_hosts(auto, None, "b").hosts] == ["a"]
    with pytest.raises(UsageError, match="a has gpus: auto, so its devices are known only"):
        select_hosts(auto, None, "a:1")


def test_gpus_per_host_replaces_counts_and_respects_devices() -> None:
    inventory = Inventory("h", (HostSpec(host="a", gpus=2), HostSpec(host="b", gpus=1)))
    assert [s.gpus for s in override_gpus(inventory, 4).hosts] == [4, 4]
    assert [s.gpus for s in override_gpus(inventory, None).hosts] == [None, None]
    with_devices = Inventory("h", (HostSpec(host="a", gpus=2, devices=(0, 1), line=3),))
    assert override_gpus(with_devices, None).hosts[0].gpus == 2
    with pytest.raises(UsageError, match="h:3: a has devices: \\[0, 1\\]"):
        override_gpus(with_devices, 4)


# -- test_multinode_runner.py: what is left to launch, through the real CLI's plan --------


@pytest.fixture
def hostfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ssh_config").write_text("")
    path = tmp_path / "hostfile"
    path.write_text("worker-0 slots=4\nworker-1 slots=4\n")
    return path


def dry_run(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    argv = ["run", "--dry-run", "--json", "--ssh-config", "ssh_config", "--job-id", "j"]
    assert main([*argv, *flags, "hostfile", "test_launcher.py"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("flags", "hosts", "processes"),
    [
        (["--exclude", "worker-1"], ["worker-0"], 4),
        (["--include", "worker-0:0,1@worker-1:0,1"], ["worker-0", "worker-1"], 4),
        # DeepSpeed's srun backend refuses these (no device ids, no uneven counts);
        # clusterlaunch sets each host's visible devices itself, over SSH and srun alike.
        (["--include", "worker-1:0,2"], ["worker-1"], 2),
        (["--exclude", "worker-1:1,2,3"], ["worker-0", "worker-1"], 5),
    ],
)
def test_resource_filter_plans(
    hostfile: Path,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    hosts: list[str],
    processes: int,
) -> None:
    plan = dry_run(capsys, *flags)
    assert [node["host"] for node in plan["nodes"]] == hosts
    assert plan["world_size"] == processes
    assert plan["notes"] == [f"{flags[0]} {flags[1]}: {len(hosts)} of 2 host(s)"]


def test_the_plan_shows_the_devices(hostfile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = dry_run(capsys, "--include", "worker-0@worker-1:0,2")
    assert [(n["nproc"], n["global_ranks"], n["devices"]) for n in plan["nodes"]] == [
        (4, [0, 1, 2, 3], None),
        (2, [4, 5], [0, 2]),
    ]
    assert "CUDA_VISIBLE_DEVICES" not in plan["nodes"][0]["env"]
    assert plan["nodes"][1]["env"]["CUDA_VISIBLE_DEVICES"] == "0,2"
    argv = ["run", "--dry-run", "--ssh-config", "ssh_config", "--job-id", "j"]
    assert main([*argv, "--include", "worker-0@worker-1:0,2", "hostfile", "t.py"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "# --include worker-0@worker-1:0,2: 2 of 2 host(s)"
    assert lines[3].split() == ["node", "host", "addr", "nproc", "devices", "ranks", "workdir"]
    assert lines[4].split()[3:6] == ["4", "all", "0-3"]
    assert lines[5].split()[3:6] == ["2", "0,2", "4-5"]


def test_unknown_host_is_one_line_before_anything(
    hostfile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "--dry-run", "--include", "jeff", "hostfile", "t.py"]) == 2
    assert capsys.readouterr().err == (
        "clusterlaunch: error: --include 'jeff': no host 'jeff' in hostfile (worker-0, worker-1)\n"
    )


def test_a_name_may_be_a_range_as_in_the_hosts_file() -> None:
    assert parse_filter("gpu[01-03]:0@gpu02:1", "--include") == {
        "gpu01": [0],
        "gpu02": [0, 1],
        "gpu03": [0],
    }
    hosts = {f"gpu{n:02}": [0, 1] for n in range(1, 5)}
    assert resource_filter(hosts, include="gpu[02-03]:1") == {"gpu02": [1], "gpu03": [1]}
    assert resource_filter(hosts, exclude="gpu[01-03]") == {"gpu04": [0, 1]}
    with pytest.raises(UsageError, match="no host 'gpu05'"):
        resource_filter(hosts, include="gpu[04-05]")


V6 = {"fd42:6::10": [0, 1], "FD42:6:0::11": [0, 1], "w2": [0, 1]}


@pytest.mark.parametrize(
    ("flag", "text", "left"),
    [
        ("include", "fd42:6::10", {"fd42:6::10": [0, 1]}),
        ("include", "fd42:6::11", {"FD42:6:0::11": [0, 1]}),  # any spelling of the file's
        ("include", "[fd42:6::11]:1@w2", {"FD42:6:0::11": [1], "w2": [0, 1]}),
        ("include", "[fd42:6:0:0::10]", {"fd42:6::10": [0, 1]}),
        ("exclude", "fd42:6::10@w2:0", {"FD42:6:0::11": [0, 1], "w2": [1]}),
        ("exclude", "[fd42:6::10]:0,1", {"FD42:6:0::11": [0, 1], "w2": [0, 1]}),
    ],
)
def test_an_ipv6_host_is_named_by_its_address_and_its_slots_in_brackets(
    flag: str, text: str, left: Slots
) -> None:
    """DeepSpeed's syntax has no way to name one: its ':' starts the slots. Every form
    was refused, asking for the HOST form just given."""
    assert resource_filter(V6, **{flag: text}) == left


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "fd42:6::11:1",
            "cannot read 'fd42:6::11:1': an IPv6 host's GPUs follow its address in brackets: "
            "write [fd42:6::11]:1",
        ),
        ("::1", "no host '::1' in hostfile (FD42:6:0::11, fd42:6::10, w2)"),
        ("[::1]:0", "no host '::1' in hostfile"),
        ("a:b:c", "cannot read 'a:b:c': a host name holds no ':'; write an IPv6 host as"),
        ("[fd42:6::11]:1:2", "cannot read '[fd42:6::11]:1:2': write an IPv6 host's GPUs as"),
    ],
)
def test_an_ipv6_filter_that_names_no_host_says_what_to_write(text: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        resource_filter(V6, include=text)
    assert message in str(info.value)
    assert "write HOST or HOST:SLOT" not in str(info.value)
