"""Host expressions mean what ClusterShell's NodeSet says, within a bound on the work.

The expressions come from ClusterShell's own tests (tests/NodeSetTest.py,
tests/NodeSetErrorTest.py) and from issue 14; each is run through NodeSet
itself and through :func:`expand_hosts`, and the two must agree.
"""

from __future__ import annotations

import time

import pytest
from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException

from clusterlaunch.core.errors import HostsFileError
from clusterlaunch.core.hostfile import parse_inventory
from clusterlaunch.core.hostranges import (
    MAX_OPERAND_NAMES,
    HostRangeError,
    count_hosts,
    expand_hosts,
)

ACCEPTED = [
    # issue 14
    "node0,node1",
    "tigrou[ 9 - 11 ]",
    "gpu[1-8]!gpu3",
    "n[1-5]&n[3-8]",
    "n[1-5]^n[3-8]",
    "node[1-3]!node2,node9",
    "n[1-3] ,n4",
    # ClusterShell's tests/NodeSetTest.py
    " tigrou2 , tigrou7 , tigrou[5,9-11] ",
    "   tigrou2 ,    tigrou5,tigrou7 , tigrou[ 9   - 11 ]    ",
    " tigrou [1-5] & tigrou [0,2,4] ! tigrou [2-3] ^ tigrou [3-5], tigrou 1 ",
    "tigrou 0, tigrou [1],tigrou [2-3]",
    "[0]cluster",
    "clu-0-[3-23]",
    "clust%ser[3-30]",
    "myclu%ster,clust%ser[3-30]",
    "cluster[1-30]c[1-2]",
    "x4nova[1-3]p[0-1]",
    # ranges clusterlaunch documents
    "gpu[01-16]",
    "gpu[1-4,7]",
    "gpu[1-15/2]",
    "rack[1-2]-n[01-08]",
    "gpu[3,1,2]",
    "n[-1]",
    "n[1-2],n[2-3]",
    # refused by ClusterShell's error tests when they were written, accepted by today's
    # NodeSet (1.10): they agree with the NodeSet installed, whatever it says
    "nova[-3/2]",
    "nova3,nova4,[5-8],nova6",
]

REFUSED = [
    # issue 14: they were literal names before
    "nova6,",
    "foo,,bar",
    "foo!",
    # ClusterShell's tests/NodeSetErrorTest.py
    "nova[]",
    "nova[-]",
    "nova[A]",
    "nova[2-5/a]",
    "nova[3/2]",
    "nova[3-/2]",
    "nova[-/2]",
    "nova[4-a/2]",
    "nova[4-3/2]",
    "nova[4-5/-2]",
    "nova[4-2/-2]",
    "nova[004-002]",
    "nova[3-59/2,102a]",
    "nova[3-59/2,,102]",
    "nova[]p0",
    "x4nova[4-3/2]p0",
    "nova[3-59/2,102",
    "nova3,nova4,,nova6",
    "nova6[",
    "nova6]",
    "n6[1-4]]",
    "n[1-4]0[3-4]",
    "n6[1-4][3-4]",
    "[1-30][4-9]",
    "x[1-30]p4-9]",
    "xazer][1-30]p[4-9]",
    "xa[[zer[1-30]p[4-9]",
    "foo&",
    "foo^",
    "c[1-30]c[1-2]!",
    "!foo",
    ",foo",
    "&foo",
    "^foo",
    "!",
    ",",
    ",,,",
]


def node_set(expression: str) -> list[str] | None:
    """NodeSet's own answer: its names, or ``None`` when it refuses the expression."""
    try:
        return list(NodeSet(expression, resolver=RESOLVER_NOGROUP))
    except (NodeSetException, RangeSetException, ValueError):
        return None


@pytest.mark.parametrize("expression", ACCEPTED)
def test_accepted_expressions_agree_with_nodeset(expression: str) -> None:
    names = node_set(expression)
    assert names, "NodeSet itself accepts this one"
    assert expand_hosts(expression) == names
    assert count_hosts(expression) >= len(names)  # the bound never undercounts


@pytest.mark.parametrize("expression", REFUSED)
def test_refused_expressions_agree_with_nodeset(expression: str) -> None:
    assert node_set(expression) is None, "NodeSet itself refuses this one"
    with pytest.raises(HostRangeError):
        expand_hosts(expression)


def test_issue_cases_by_equality() -> None:
    assert expand_hosts("node0,node1") == ["node0", "node1"]
    assert expand_hosts("tigrou[ 9 - 11 ]") == ["tigrou9", "tigrou10", "tigrou11"]
    assert expand_hosts("gpu[1-4]!gpu[2-3]") == ["gpu1", "gpu4"]


def test_an_expression_with_no_host_is_bad_input() -> None:
    assert node_set("gpu[1-2]!gpu[1-2]") == []
    with pytest.raises(HostRangeError, match=r"'gpu\[1-2\]!gpu\[1-2\]' stands for no host"):
        expand_hosts("gpu[1-2]!gpu[1-2]")


@pytest.mark.parametrize("text", ["gpu[1-2]!gpu[1-2]", "gpu[1-2]&cpu[1-2]"])
def test_an_empty_entry_in_a_hosts_file_is_one_line_exit_2(text: str) -> None:
    yaml = f"hosts:\n  - {{host: 'a', gpus: 1}}\n  - {{host: '{text}', gpus: 1}}\n"
    with pytest.raises(HostsFileError) as info:
        parse_inventory(yaml, "h.yaml")
    assert str(info.value).startswith("h.yaml:3: hosts[1].host: ")
    assert "stands for no host" in str(info.value)


def test_groups_are_refused_not_looked_up() -> None:
    for expression in ("@gpus", "n[1-2],@all", " @x!n1"):
        with pytest.raises(HostRangeError, match="is a ClusterShell group"):
            expand_hosts(expression)


def test_plain_names_are_never_reinterpreted() -> None:
    for name in ("10.0.0.1", "fe80::1", "fe80::5054:ff:feff:6944%eth0", "gpu01.example.com"):
        assert expand_hosts(name) == [name]
    # The one place NodeSet differs: it refuses an index past 10**100; a plain
    # name is handed to SSH as written (and OpenSSH's name rules apply).
    long_index = "nova" + "3" * 101
    assert node_set(long_index) is None and expand_hosts(long_index) == [long_index]


def test_the_bound_is_checked_before_nodeset_builds_anything() -> None:
    started = time.process_time()
    with pytest.raises(HostRangeError, match="stands for 1,000,000,000 hosts"):
        expand_hosts("gpu[1-1000000000]")
    with pytest.raises(HostRangeError, match="stand for 199,999 names"):
        expand_hosts("n[1-100000]!n[1-99999]")
    with pytest.raises(HostRangeError, match="stand for 2,000,000,000 names"):
        expand_hosts("n[1-1000000000]&n[1-1000000000]")
    assert time.process_time() - started < 0.5


def test_operands_up_to_the_bound_are_expanded() -> None:
    half = MAX_OPERAND_NAMES // 2
    assert expand_hosts(f"n[1-{half}]!n[2-{half}]") == ["n1"]
    assert count_hosts(f"a[1-{half}]^a[1-{half}]") == MAX_OPERAND_NAMES


def test_the_result_is_held_to_the_host_limit() -> None:
    with pytest.raises(HostRangeError, match="stands for 5,000 hosts; a job has at most 4,096"):
        expand_hosts("n[1-6000]!n[5001-6000]")
    assert len(expand_hosts("n[1-6000]!n[4097-6000]")) == 4096


def test_count_reads_ranges_as_rangeset_does() -> None:
    assert count_hosts("n[1-10/3]") == len(NodeSet("n[1-10/3]"))
    assert count_hosts("n[-8--4]") == 5
    assert count_hosts("n[-3-5]") == 9
    with pytest.raises(HostRangeError, match="runs backwards"):
        count_hosts("n[5-1]")
    with pytest.raises(HostRangeError, match="has a step"):
        count_hosts("n[1-9/0]")
    with pytest.raises(HostRangeError, match="unbalanced brackets"):
        count_hosts("n[1-2")
