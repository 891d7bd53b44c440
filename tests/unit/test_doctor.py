"""The doctor's judgement and output, on made-up host reports (core/doctor.py, doctorview.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from clusterlaunch.core.doctor import (
    Finding,
    HostCheck,
    all_reduce_rows,
    bus_bandwidth,
    clock_skew,
    judge,
    nccl_selected,
    pair_matrix,
)
from clusterlaunch.core.doctorview import doctor_json, doctor_text

NAMES = ("node0", "node1", "node2")
ADDRS = {"node0": "10.0.0.10", "node1": "10.0.0.11", "node2": "10.0.0.12"}
IFACES = {"lo": "127.0.0.1", "eth0": None}


def facts(host: str, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "python": "3.11.7",
        "torch": "2.13.0",
        "cuda": None,
        "nccl": None,
        "gpu_tool": None,
        "gpus": [],
        "gpu_processes": [],
        "hostname": host,
        "resolves_to": [ADDRS[host]],
        "interfaces": {**IFACES, "eth0": ADDRS[host]},
        "ifname_env": {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None},
        "route_source": ADDRS[host],
        "route_interface": "eth0",
        "disk_free_bytes": 50 << 30,
        "workdir": "/work",
        "port": 40000,
    }
    return {**base, **changes}


def ok_pairs(host: str) -> dict[str, dict[str, Any]]:
    return {peer: {"error": None, "ms": 0.2} for peer in NAMES if peer != host}


def healthy(**per_host: dict[str, Any]) -> list[HostCheck]:
    return [
        HostCheck(
            host,
            (ADDRS[host],),
            facts(host, **per_host.get(host, {})),
            skew=(0.01, 0.002),
            pairs=ok_pairs(host),
        )
        for host in NAMES
    ]


def test_healthy_hosts_have_no_finding() -> None:
    assert judge(healthy()) == []


def test_name_resolving_to_loopback_is_one_error_naming_the_host() -> None:
    checks = healthy(node1={"resolves_to": ["127.0.1.1"]})
    [finding] = judge(checks)
    assert (finding.level, finding.where) == ("error", "node1")
    assert "127.0.1.1 (loopback)" in finding.text and "10.0.0.11" in finding.text


def test_loopback_name_is_fine_when_peers_reach_the_host_over_loopback() -> None:
    # Peers dialling 127.0.0.12 are on this very machine: loopback works for them.
    loopback = {"resolves_to": ["127.0.0.1"], "port": None}  # no listener: no pair check
    check = HostCheck("node1", ("127.0.0.12",), facts("node1", **loopback))
    other = HostCheck("node0", ("127.0.0.11",), facts("node0", **loopback))
    assert judge([other, check]) == []


def test_loopback_name_on_a_single_host_is_fine() -> None:
    loopback = facts("node0", resolves_to=["127.0.1.1"])
    check = HostCheck("node0", (ADDRS["node0"],), loopback, pairs={})
    assert judge([check]) == []  # one host: every collective stays on it


def test_loopback_name_with_gloo_interface_pinned_is_a_warning() -> None:
    env = {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": "eth0"}
    checks = healthy(node2={"resolves_to": ["127.0.1.1"], "ifname_env": env})
    assert [(f.level, f.where) for f in judge(checks)] == [("warning", "node2")]


@pytest.mark.parametrize("variable", ["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"])
def test_socket_ifname_naming_a_missing_interface_is_one_error(variable: str) -> None:
    env = {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None, variable: "ib9"}
    [finding] = judge(healthy(node1={"ifname_env": env}))
    assert (finding.level, finding.where) == ("error", "node1")
    assert finding.text.startswith(f"{variable}=ib9")


@pytest.mark.parametrize(
    ("value", "selected"),
    [
        ("eth", ["eth0", "eth10"]),
        ("=eth1", []),
        ("=eth10", ["eth10"]),
        ("^eth", ["ib0", "lo"]),
        ("^=eth0,lo", ["eth10", "ib0"]),
        ("ib,eth1", ["eth10", "ib0"]),
    ],
)
def test_nccl_socket_ifname_is_read_as_nccl_reads_it(value: str, selected: list[str]) -> None:
    assert nccl_selected(value, ["eth0", "eth10", "ib0", "lo"]) == selected


def test_version_mismatch_names_which_host_has_which() -> None:
    [finding] = judge(healthy(node2={"torch": "2.12.0"}))
    assert finding == Finding(
        "error", "all hosts", "torch differs: 2.13.0 on node0, node1; 2.12.0 on node2"
    )


def test_python_mismatch_is_a_warning() -> None:
    [finding] = judge(healthy(node0={"python": "3.10.1"}))
    assert (finding.level, finding.where) == ("warning", "all hosts")


def test_a_pair_failing_both_ways_is_one_finding() -> None:
    checks = healthy()
    refused = {"error": "cannot connect to 10.0.0.12:40000: [Errno 13] Permission denied"}
    pairs1 = {**ok_pairs("node1"), "node2": refused}
    pairs2 = {**ok_pairs("node2"), "node1": refused}
    checks[1] = HostCheck("node1", (ADDRS["node1"],), checks[1].facts, pairs=pairs1)
    checks[2] = HostCheck("node2", (ADDRS["node2"],), checks[2].facts, pairs=pairs2)
    [finding] = judge(checks)
    assert (finding.level, finding.where) == ("error", "node1 <-> node2")
    assert pair_matrix(checks)["node1"] == {"node0": True, "node1": None, "node2": False}


def test_a_pair_failing_one_way_names_the_direction() -> None:
    checks = healthy()
    pairs = {**ok_pairs("node0"), "node2": {"error": "timed out"}}
    checks[0] = HostCheck("node0", (ADDRS["node0"],), checks[0].facts, pairs=pairs)
    assert [(f.where, f.text.split(";")[0]) for f in judge(checks)] == [
        ("node0 -> node2", "timed out")
    ]


def test_silent_host_clock_disk_and_busy_gpu() -> None:
    checks = healthy(
        node1={
            "disk_free_bytes": 10 << 20,
            "gpu_processes": [{"pid": 7, "name": "python", "memory_mib": 900}],
        }
    )
    checks[0] = HostCheck("node0", (ADDRS["node0"],), checks[0].facts, skew=(3.0, 0.1))
    checks[2] = HostCheck("node2", (ADDRS["node2"],), None, problem="exit 127: no python")
    found = [(f.level, f.where, f.text[:20]) for f in judge(checks)]
    assert found == [
        ("warning", "node0", "its clock is +3.00 s"),
        ("warning", "node1", "only 10 MiB free in "),
        ("warning", "node1", "pid 7 (python) holds"),
        ("error", "node2", "the doctor got no re"),
        ("error", "node0", "did not finish the a"),
    ]


def test_clock_skew_assumes_the_middle_of_the_round_trip() -> None:
    assert clock_skew(sent=100.0, received=100.2, remote=102.1) == (2.0, 0.1)


def test_bus_bandwidth_is_nccl_tests_all_reduce_factor() -> None:
    assert bus_bandwidth(10.0, 4) == 15.0
    assert bus_bandwidth(10.0, 1) == 0.0
    rows = all_reduce_rows([{"bytes": 1 << 20, "seconds": 0.001}], ranks=2)
    assert rows == [
        {"bytes": 1 << 20, "seconds": 0.001, "algbw_gbps": 1.0486, "busbw_gbps": 1.0486}
    ]


def test_json_has_every_figure_and_text_has_matrix_and_verdicts() -> None:
    checks = healthy(node1={"resolves_to": ["127.0.1.1"]})
    findings = judge(checks)
    document = json.loads(doctor_json(checks, findings))
    assert document["hosts"]["node1"]["facts"]["resolves_to"] == ["127.0.1.1"]
    assert document["matrix"]["node0"] == {"node0": None, "node1": True, "node2": True}
    assert document["errors"] == 1
    text = doctor_text(checks, findings)
    assert "node2      ok         ok         -" in text
    assert text.splitlines()[-1] == "doctor: 1 error(s), 0 warning(s) on 3 host(s)"
    assert text.splitlines()[-2].startswith("error: node1: its name 'node1' resolves")
