"""The rank planner: a pure function from hosts and options to per-host commands."""

from __future__ import annotations

import datetime
import re
import shlex
from collections.abc import Sequence
from dataclasses import replace

import pytest

from clusterlaunch.core import commands, envpolicy
from clusterlaunch.core.checkplan import probe_command
from clusterlaunch.core.defaults import PROBE_DIAL_TIMEOUT_S, SETUP_TIMEOUT_S
from clusterlaunch.core.envhandoff import renaming_script
from clusterlaunch.core.errors import UsageError
from clusterlaunch.core.model import (
    HostSpec,
    Inventory,
    JobPlan,
    LaunchOptions,
    NodePlan,
    SshTarget,
)
from clusterlaunch.core.planner import (
    JOB_ID_VAR,
    choose_master_addr,
    forwarded_env,
    master_port_of,
    new_job_id,
    node_addr,
    node_env,
    parse_env_assignments,
    parse_torchrun_args,
    plan_job,
)
from clusterlaunch.core.setupguard import SetupGuard, guarded

JOB = "j1"
CWD = "/home/me/proj"
AGENT_SIZE = 12345


def inventory(
    *hosts: HostSpec, master_port: int | None = None, master_addr: str | None = None
) -> Inventory:
    return Inventory(
        path="hosts.yaml", hosts=hosts, master_port=master_port, master_addr=master_addr
    )


def target(alias: str, hostname: str | None = None, **kwargs: object) -> SshTarget:
    return SshTarget(alias=alias, hostname=hostname or alias, **kwargs)  # type: ignore[arg-type]


def targets_for(inv: Inventory) -> list[SshTarget]:
    return [
        SshTarget(alias="localhost", hostname="localhost", port=0) if h.is_local else target(h.host)
        for h in inv.hosts
    ]


def plan(
    inv: Inventory,
    options: LaunchOptions | None = None,
    targets: Sequence[SshTarget] | None = None,
    local_env: dict[str, str] | None = None,
    exec_argv: Sequence[str] | None = None,
) -> JobPlan:
    return plan_job(
        inv,
        targets_for(inv) if targets is None else targets,
        options or LaunchOptions(script="train.py"),
        job_id=JOB,
        local_env=local_env or {},
        local_cwd=CWD,
        agent_size=AGENT_SIZE,
        exec_argv=exec_argv,
    )


def agent_words(python: str, node_rank: int, first_rank: int | None) -> list[str]:
    words = [
        *commands.bootstrap_argv(python, "agent", AGENT_SIZE, site=False),
        "--job-id",
        JOB,
        "--node-rank",
        str(node_rank),
        "--grace",
        "5",
        "--heartbeat-timeout",
        "15",
    ]
    if first_rank is not None:
        words += [
            "--first-rank",
            str(first_rank),
            "--rank-files",
        ]
    return [*words, "--nodes", "2"]  # the job's node count, for its record (kill's table)


# --------------------------------------------------------------------------------------- rank table


def test_heterogeneous_three_plus_one() -> None:
    inv = inventory(HostSpec(host="a", gpus=3), HostSpec(host="b", gpus=1))
    job = plan(inv)
    assert job.world_size == 4
    assert [(n.node_rank, n.host, n.nproc, n.first_rank, n.global_ranks) for n in job.nodes] == [
        (0, "a", 3, 0, (0, 1, 2)),
        (1, "b", 1, 3, (3,)),
    ]
    assert job.node_of_rank(2).host == "a"
    assert job.node_of_rank(3).host == "b"
    with pytest.raises(KeyError):
        job.node_of_rank(4)


def test_four_two_one_follows_file_order() -> None:
    inv = inventory(
        HostSpec(host="z", gpus=4), HostSpec(host="a", gpus=2), HostSpec(host="m", gpus=1)
    )
    job = plan(inv)
    assert job.world_size == 7
    assert [(n.host, n.node_rank, n.global_ranks) for n in job.nodes] == [
        ("z", 0, (0, 1, 2, 3)),
        ("a", 1, (4, 5)),
        ("m", 2, (6,)),
    ]
    for node in job.nodes:
        argv = node.argv
        assert argv[argv.index("--node-rank") + 1] == str(node.node_rank)
        assert argv[argv.index("--nproc-per-node") + 1] == str(node.nproc)
        assert argv[argv.index("--nnodes") + 1] == "3"


def test_full_plan_by_equality() -> None:
    inv = inventory(
        HostSpec(
            host="a", gpus=2, env={"A": "1"}, devices=(1, 3), workdir="/w", setup="source env.sh"
        ),
        HostSpec(host="b", gpus=1, python="/opt/py/bin/python"),
        master_port=29500,
    )
    tgts = [target("a", "10.0.0.1", port=2201, user="u"), target("b", "10.0.0.2")]
    options = LaunchOptions(
        script="train.py", script_args=("--lr", "3e-4"), torchrun_args=("--max-restarts", "3")
    )
    job = plan(inv, options, targets=tgts)

    def argv_for(python: str, node_rank: int, nproc: int) -> tuple[str, ...]:
        return (
            python, "-m", "torch.distributed.run",
            "--nnodes", "2",
            "--nproc-per-node", str(nproc),
            "--node-rank", str(node_rank),
            "--rdzv-backend", "static",
            "--rdzv-id", JOB,
            "--master-addr", "10.0.0.1",
            "--master-port", "29500",
            "--redirects", "3",
            "--log-dir", "AUTO",
            "--max-restarts", "3",
            "--", "train.py", "--lr", "3e-4",
        )  # fmt: skip

    env0 = {"A": "1", JOB_ID_VAR: JOB, "CUDA_VISIBLE_DEVICES": "1,3"}
    env1 = {JOB_ID_VAR: JOB}
    argv0 = argv_for("python3", 0, 2)
    argv1 = argv_for("/opt/py/bin/python", 1, 1)
    assert job == JobPlan(
        job_id=JOB,
        world_size=3,
        master_addr="10.0.0.1",
        master_port=29500,
        nodes=(
            NodePlan(
                node_rank=0,
                host="a",
                target=tgts[0],
                addr="10.0.0.1",
                nproc=2,
                first_rank=0,
                env=env0,
                workdir="/w",
                python="python3",
                setup="source env.sh",
                argv=argv0,
                command=commands.shell_command(
                    "/w",
                    "source env.sh",
                    env0,
                    [*agent_words("python3", 0, 0), "--", *argv0],
                    SetupGuard(SETUP_TIMEOUT_S),
                ),
                agent_argv=tuple(agent_words("python3", 0, 0)),
                setup_guard=SetupGuard(SETUP_TIMEOUT_S),
                devices=(1, 3),
            ),
            NodePlan(
                node_rank=1,
                host="b",
                target=tgts[1],
                addr="10.0.0.2",
                nproc=1,
                first_rank=2,
                env=env1,
                workdir=CWD,
                python="/opt/py/bin/python",
                setup=None,
                argv=argv1,
                command=commands.shell_command(
                    CWD, None, env1, [*agent_words("/opt/py/bin/python", 1, 2), "--", *argv1]
                ),
                agent_argv=tuple(agent_words("/opt/py/bin/python", 1, 2)),
                setup_guard=SetupGuard(SETUP_TIMEOUT_S),
            ),
        ),
    )
    # The command, split as the remote shell would, is exactly these words.
    assert shlex.split(job.nodes[1].command) == [
        "cd", "--", CWD, "&&", *setting({JOB_ID_VAR: JOB}),
        *agent_words("/opt/py/bin/python", 1, 2), "--", *argv1,
    ]  # fmt: skip
    setup = guarded("source env.sh", SetupGuard(SETUP_TIMEOUT_S))
    prefix = f"cd -- /w && {setup} && "
    assert job.nodes[0].command.startswith(prefix)
    assert shlex.split(job.nodes[0].command[len(prefix) :]) == [
        *setting({"A": "1", JOB_ID_VAR: JOB, "CUDA_VISIBLE_DEVICES": "1,3"}),
        *agent_words("python3", 0, 0), "--", *argv0,
    ]  # fmt: skip


def setting(env: dict[str, str]) -> list[str]:
    """The words before the program's that set ``env`` (core/envhandoff.py): no value is
    in ``/bin/sh``'s argv, only in the login shell's builtin ``export``."""
    held = [f"__cl_{name}={value}" for name, value in env.items()]
    return ["export", *held, "&&", "exec", "/bin/sh", "-c", renaming_script(env), "sh"]


def test_torchrun_argv_layout_with_auto_port() -> None:
    job = plan(inventory(HostSpec(host="a", gpus=4), HostSpec(host="b", gpus=4)))
    assert job.master_port is None
    assert job.nodes[1].argv == (
        "python3", "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "1",
        "--rdzv-backend", "static", "--rdzv-id", JOB,
        "--master-addr", "a", "--master-port", commands.AUTO_PORT,
        "--redirects", "3", "--log-dir", "AUTO",
        "--", "train.py",
    )  # fmt: skip


def test_options_python_and_workdir_override_hosts_file() -> None:
    inv = inventory(HostSpec(host="a", gpus=1, python="/file/python", workdir="/file/dir"))
    job = plan(inv, LaunchOptions(script="t.py", python="/cli/python", workdir="/cli/dir"))
    node = job.nodes[0]
    assert (node.python, node.workdir, node.argv[0]) == ("/cli/python", "/cli/dir", "/cli/python")
    assert shlex.split(node.command)[:3] == ["cd", "--", "/cli/dir"]


def test_workdir_falls_back_to_hosts_file_then_cwd() -> None:
    inv = inventory(HostSpec(host="a", gpus=1, workdir="/file/dir"), HostSpec(host="b", gpus=1))
    assert [n.workdir for n in plan(inv).nodes] == ["/file/dir", CWD]


def test_exec_plan_runs_the_command_without_torchrun() -> None:
    inv = inventory(HostSpec(host="a", gpus=2), HostSpec(host="b", gpus=1))
    job = plan(inv, LaunchOptions(script=""), exec_argv=["hostname", "-f"])
    assert job.world_size == 3
    for node in job.nodes:
        assert node.argv == ("hostname", "-f")
        assert shlex.split(node.command) == [
            "cd", "--", CWD, "&&", *setting({JOB_ID_VAR: JOB}),
            *agent_words("python3", node.node_rank, None), "--", "hostname", "-f",
        ]  # fmt: skip


def test_grace_and_heartbeat_numbers() -> None:
    inv = inventory(HostSpec(host="a", gpus=1))
    words = shlex.split(
        plan(inv, LaunchOptions(script="t.py", grace=2.5, heartbeat_timeout=30.0)).nodes[0].command
    )
    assert words[words.index("--grace") + 1] == "2.5"
    assert words[words.index("--heartbeat-timeout") + 1] == "30"


def test_targets_must_match_hosts() -> None:
    inv = inventory(HostSpec(host="a", gpus=1), HostSpec(host="b", gpus=1))
    with pytest.raises(ValueError, match="one target per host"):
        plan(inv, targets=[target("a")])


# -------------------------------------------------------------------------- master address and port


def test_master_addr_explicit_wins() -> None:
    inv = inventory(HostSpec(host="a", gpus=1, addr="192.168.0.1"), master_addr="10.9.9.9")
    assert choose_master_addr(inv, [target("a", "10.0.0.1")]) == "10.9.9.9"


def test_master_addr_node0_addr() -> None:
    inv = inventory(HostSpec(host="a", gpus=1, addr="192.168.0.1"), HostSpec(host="b", gpus=1))
    assert choose_master_addr(inv, [target("a", "10.0.0.1"), target("b")]) == "192.168.0.1"


def test_master_addr_is_resolved_hostname_never_alias() -> None:
    inv = inventory(HostSpec(host="alias-a", gpus=1), HostSpec(host="alias-b", gpus=1))
    tgts = [target("alias-a", "gpu-a.cluster.example"), target("alias-b", "gpu-b.cluster.example")]
    job = plan(inv, targets=tgts)
    assert job.master_addr == "gpu-a.cluster.example"
    assert [n.addr for n in job.nodes] == ["gpu-a.cluster.example", "gpu-b.cluster.example"]
    for node in job.nodes:
        assert "alias-a" not in node.argv
        assert node.argv[node.argv.index("--master-addr") + 1] == "gpu-a.cluster.example"


def test_single_localhost_master_is_loopback() -> None:
    inv = inventory(HostSpec(host="localhost", gpus=2))
    tgts = [SshTarget(alias="localhost", hostname="localhost", port=0)]
    assert choose_master_addr(inv, tgts) == "127.0.0.1"
    job = plan(inv, targets=tgts)
    assert (job.master_addr, job.nodes[0].addr) == ("127.0.0.1", "127.0.0.1")


def test_localhost_cannot_be_master_of_multi_host_job() -> None:
    inv = inventory(HostSpec(host="localhost", gpus=1, entry=0), HostSpec(host="b", gpus=1))
    with pytest.raises(
        UsageError, match=r"hosts\.yaml: hosts\[0\]: localhost cannot be the master"
    ):
        choose_master_addr(inv, targets_for(inv))
    with pytest.raises(UsageError):
        plan(inv)


H27 = """\
defaults:
  python: /usr/bin/python3
hosts:
  - host: node0
    gpus: 1
  - host: localhost
    gpus: 1
  - host: node1
    gpus: 1
"""


def _master_error(inv: Inventory) -> str:
    with pytest.raises(UsageError) as info:
        plan(inv)
    return str(info.value)


def test_localhost_master_names_its_own_entry_and_what_made_it_node0() -> None:
    """It always said hosts[0], the field of node0, with localhost's line."""
    from clusterlaunch.core.hostfile import parse_inventory
    from clusterlaunch.core.includes import select_hosts

    whole = parse_inventory(H27, "h27.yaml")
    excluded = whole.narrowed(select_hosts(whole, None, "node0").hosts, "--exclude node0")
    assert _master_error(excluded) == (
        "h27.yaml:6: hosts[1]: localhost is node 0, the master, as --exclude node0 leaves out "
        "node0, and localhost cannot be the master of a multi-host job; set its addr: (or "
        "master_addr:, or --master-addr) to an address the other hosts can reach"
    )
    restarted = whole.narrowed(whole.hosts[1:], "this restart")
    assert _master_error(restarted).startswith(
        "h27.yaml:6: hosts[1]: localhost is node 0, the master, as this restart leaves out node0, "
    )
    # A later restart that keeps node 0 keeps what --exclude said; a spare ahead is no host.
    assert excluded.narrowed(excluded.hosts, "this restart").node0_moved == (
        "--exclude node0 leaves out node0"
    )
    spare = "hosts:\n  - {host: s, gpus: 1, spare: true}\n  - {host: localhost, gpus: 1}\n"
    spare_first = parse_inventory(spare + "  - {host: node1, gpus: 1}\n", "h.yaml")
    assert spare_first.narrowed(spare_first.hosts[1:], "this restart").node0_moved is None


def test_localhost_master_of_the_file_names_no_cause() -> None:
    from clusterlaunch.core.hostfile import parse_inventory

    first = parse_inventory("hosts:\n  - {host: localhost, gpus: 1}\n  - {host: b, gpus: 1}\n", "h")
    assert _master_error(first) == (
        "h:2: hosts[0]: localhost cannot be the master of a multi-host job; set its addr: "
        "(or master_addr:, or --master-addr) to an address the other hosts can reach"
    )


def test_many_hosts_left_out_are_counted() -> None:
    hosts = tuple(HostSpec(host=f"n{i}", gpus=1) for i in range(6))
    inv = inventory(*hosts, HostSpec(host="localhost", gpus=1), HostSpec(host="b", gpus=1))
    moved = inv.narrowed(inv.hosts[6:], "--include localhost@b").node0_moved
    assert moved == "--include localhost@b leaves out n0, n1, n2 and 3 more"


def test_exec_has_no_master_so_localhost_may_be_node0_of_many() -> None:
    """Only torchrun dials a master: exec with localhost first plans (check and run refuse)."""
    inv = inventory(HostSpec(host="localhost", gpus=1), HostSpec(host="b", gpus=1))
    job = plan(inv, exec_argv=["hostname"])
    assert [node.argv for node in job.nodes] == [("hostname",), ("hostname",)]


def test_localhost_master_of_an_mpi_hostfile_names_its_line_and_a_flag() -> None:
    """A hostfile holds no addr:/master_addr: keys: the fix is --master-addr, at the line."""
    from clusterlaunch.core.hostfile import parse_inventory

    inv = parse_inventory("# hosts\nlocalhost slots=1\nnode1 slots=1\n", "hosts.txt")
    with pytest.raises(UsageError) as info:
        plan(inv)
    message = str(info.value)
    assert message.startswith("hosts.txt:2: localhost cannot be the master"), message
    assert "--master-addr" in message and "addr:" not in message.split("YAML")[0]


def test_localhost_node0_with_addr_or_master_addr_is_fine() -> None:
    with_addr = inventory(
        HostSpec(host="localhost", gpus=1, addr="10.0.0.5"), HostSpec(host="b", gpus=1)
    )
    assert plan(with_addr).master_addr == "10.0.0.5"
    with_master = inventory(
        HostSpec(host="localhost", gpus=1), HostSpec(host="b", gpus=1), master_addr="10.0.0.6"
    )
    job = plan(with_master)
    assert job.master_addr == "10.0.0.6"
    assert job.nodes[0].addr == "127.0.0.1"


def test_node_addr() -> None:
    assert node_addr(HostSpec(host="a", gpus=1, addr="1.2.3.4"), target("a", "h")) == "1.2.3.4"
    assert node_addr(HostSpec(host="a", gpus=1), target("a", "h")) == "h"
    local = SshTarget(alias="localhost", hostname="localhost", port=0)
    assert node_addr(HostSpec(host="localhost", gpus=1), local) == "127.0.0.1"


@pytest.mark.parametrize(
    ("file_port", "options", "expected"),
    [
        (None, LaunchOptions(script="t"), None),
        (29500, LaunchOptions(script="t"), 29500),
        (29500, LaunchOptions(script="t", master_port=1234), 1234),
        (None, LaunchOptions(script="t", master_port=1234), 1234),
        (29500, LaunchOptions(script="t", master_port_auto=True), None),
    ],
)
def test_master_port(file_port: int | None, options: LaunchOptions, expected: int | None) -> None:
    inv = inventory(HostSpec(host="a", gpus=1), master_port=file_port)
    assert master_port_of(inv, options) == expected
    job = plan(inv, options)
    assert job.master_port == expected
    argv = job.nodes[0].argv
    assert argv[argv.index("--master-port") + 1] == (
        commands.AUTO_PORT if expected is None else str(expected)
    )


def test_filling_in_the_master_port_is_planning_with_it() -> None:
    """``auto`` resolved after the preflight: the same plan as if the port had been given."""
    inv = inventory(
        HostSpec(host="a", gpus=2, setup="source 'a b'/env.sh", python="~/venv/bin/python"),
        HostSpec(host="b", gpus=1, workdir="~/w d", env={"X": "AUTO"}),
        master_port=29500,
    )
    options = LaunchOptions(
        script="train.py",
        script_args=("--master-port", "AUTO", "AUTO"),  # the script's words stay as they are
        torchrun_args=("--max-restarts", "3"),
        master_port_auto=True,
        setup_timeout=20,
    )
    auto = plan(inv, options)
    assert auto.master_port is None
    given = plan(inv, replace(options, master_port=31234, master_port_auto=False))
    assert auto.with_master_port(31234) == given
    for node in given.nodes:
        assert node.argv[node.argv.index("--master-port") + 1] == "31234"
        assert node.argv[-4:] == ("train.py", "--master-port", "AUTO", "AUTO")


def test_master_port_is_filled_in_once_and_only_for_torchrun() -> None:
    inv = inventory(HostSpec(host="a", gpus=1), master_port=29500)
    with pytest.raises(ValueError, match="already set"):
        plan(inv).with_master_port(1)
    with pytest.raises(ValueError):  # exec: there is no torchrun port to fill in
        plan(inventory(HostSpec(host="a", gpus=1)), exec_argv=["hostname"]).with_master_port(1)


# -------------------------------------------------------------------------------------- environment


def test_env_merge_order() -> None:
    spec = HostSpec(
        host="a", gpus=2, env={"L": "host", "F": "host", "E": "host", "H": "host"}, devices=(2, 0)
    )
    options = LaunchOptions(
        script="t.py",
        forward_env=("F*", "X"),
        env=(("E", "first"), ("E", "cli"), ("NEW", "1")),
    )
    local = {"F": "forwarded", "FOO": "forwarded-too", "X": "x", "E": "local-ignored"}
    env = node_env(spec, options, JOB, forwarded_env(options, local))
    assert env == {
        "L": "host",
        "F": "forwarded",
        "E": "cli",
        "H": "host",
        "FOO": "forwarded-too",
        "X": "x",
        "NEW": "1",
        JOB_ID_VAR: JOB,
        "CUDA_VISIBLE_DEVICES": "2,0",
    }
    assert list(env)[-2:] == [JOB_ID_VAR, "CUDA_VISIBLE_DEVICES"]


def test_env_without_devices_has_no_cuda_visible_devices() -> None:
    options = LaunchOptions(script="t")
    local = {"CUDA_VISIBLE_DEVICES": "0"}
    env = node_env(HostSpec(host="a", gpus=1), options, JOB, forwarded_env(options, local))
    assert env == {JOB_ID_VAR: JOB}


def test_forward_env_star_skips_owned_and_host_specific() -> None:
    local = {
        "NCCL_DEBUG": "INFO",
        "MY_VAR": "1",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "SSH_CONNECTION": "x",
        "BASH_FUNC_foo%%": "() { :; }",
        "BASH_FUNC_bar": "x",
        "CUDA_VISIBLE_DEVICES": "0",
        "SHELLOPTS": "braceexpand",
        "BASHOPTS": "x",
        "EUID": "1000",
        "UID": "1000",
        "PPID": "1",
        "_": "/usr/bin/env",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "8",
        "MASTER_ADDR": "x",
        "MASTER_PORT": "1",
        "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
        "TORCHELASTIC_RUN_ID": "x",
        "PET_TEE": "3",
        "CLUSTERLAUNCH_JOB_ID": "old",
        "1BAD": "x",
        "BAD-NAME": "x",
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "USER": "me",
        "PWD": "/here",
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "TERM": "xterm",
    }
    assert envpolicy.forwarded(["*"], local) == {"MY_VAR": "1", "NCCL_DEBUG": "INFO"}


def test_forward_env_exact_name_forwards_host_specific_but_never_refused() -> None:
    local = {
        "PATH": "/opt/bin",
        "HOME": "/h",
        "SSH_AUTH_SOCK": "/s",
        "RANK": "1",
        "XDG_X": "1",
        "NCCL_X": "1",
    }
    assert envpolicy.forwarded(["PATH", "HOME", "SSH_AUTH_SOCK", "RANK", "XDG_*"], local) == {
        "HOME": "/h",
        "PATH": "/opt/bin",
    }


def test_forward_env_result_is_sorted_and_case_sensitive() -> None:
    local = {"NCCL_B": "b", "NCCL_A": "a", "nccl_c": "c"}
    assert list(envpolicy.forwarded(["NCCL_*"], local).items()) == [
        ("NCCL_A", "a"),
        ("NCCL_B", "b"),
    ]


def test_forward_env_in_plan_never_carries_refused_names() -> None:
    local = {
        "NCCL_DEBUG": "INFO",
        "SSH_TTY": "/dev/pts/1",
        "TORCH_ELASTIC_WORKER_IDENTICAL": "1",
        "PATH": "/x",
    }
    job = plan(
        inventory(HostSpec(host="a", gpus=1)),
        LaunchOptions(script="t.py", forward_env=("*",)),
        local_env=local,
    )
    node = job.nodes[0]
    assert node.env == {"NCCL_DEBUG": "INFO", JOB_ID_VAR: JOB}
    assert "TORCH_ELASTIC_WORKER_IDENTICAL" not in node.command
    assert "SSH_TTY" not in node.command


def test_env_merge_helper() -> None:
    merged = envpolicy.merge({"A": "1", "B": "1"}, {"B": "2", "C": "2"}, {"A": "3"})
    assert list(merged.items()) == [("A", "3"), ("B", "2"), ("C", "2")]


@pytest.mark.parametrize(
    "name",
    [
        "SSH_AUTH_SOCK",
        "CUDA_VISIBLE_DEVICES",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_ELASTIC_WORKER_IDENTICAL",
        "TORCHELASTIC_RESTART_COUNT",
        "PET_STANDALONE",
        "PET_TEE",
        "PET_MAX_RESTARTS",
        "CLUSTERLAUNCH_JOB_ID",
        "BASH_FUNC_x%%",
        "BASH_FUNC_x",
        "1ABC",
        "A-B",
        "",
        "A B",
        "SHELLOPTS",
        "UID",
        "_",
    ],
)
def test_refused_names(name: str) -> None:
    assert envpolicy.refusal(name) is not None


@pytest.mark.parametrize(
    "name", ["NCCL_DEBUG", "_X", "a", "PATH", "HOME", "OMP_NUM_THREADS", "RANKS"]
)
def test_accepted_names(name: str) -> None:
    assert envpolicy.refusal(name) is None


# ----------------------------------------------------------------------------------- option parsing


def test_parse_env_assignments() -> None:
    assert parse_env_assignments(["A=1", "B=", "C=x=y", "A=2", "D= spaced \n"]) == (
        ("A", "1"),
        ("B", ""),
        ("C", "x=y"),
        ("A", "2"),
        ("D", " spaced \n"),
    )


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("FOO", "--env: expected KEY=VALUE, e.g. --env NCCL_DEBUG=INFO"),
        ("SSH_X=1", "--env SSH_X=...: SSH_* variables are owned"),
        ("SHLVL=1", "--env SHLVL=...: SHLVL is the remote shell's own"),
        ("RANDOM=1", "RANDOM is the remote shell's own (/bin/sh sets or counts it)"),
        ("CUDA_VISIBLE_DEVICES=0", "devices: list"),
        ("RANK=0", "set by torchrun"),
        ("1ABC=1", "not a valid variable name"),
        ("=1", "not a valid variable name"),
        ("BASH_FUNC_f%%=x", "not a valid variable name"),
    ],
)
def test_parse_env_assignments_errors(pair: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_env_assignments([pair])
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", ()),
        (
            "--max-restarts 3 --monitor-interval 1",
            ("--max-restarts", "3", "--monitor-interval", "1"),
        ),
        ("--max_restarts=3", ("--max_restarts=3",)),
        ("--role 'my role'", ("--role", "my role")),
        ("--rdzv-id my-run", ("--rdzv-id", "my-run")),
        ("--rdzv_id=my-run", ("--rdzv_id=my-run",)),
        ("--local-addr 10.0.0.1", ("--local-addr", "10.0.0.1")),
        ("--role '-a b' --shutdown-timeout 0", ("--role", "-a b", "--shutdown-timeout", "0")),
        ("--role -1", ("--role", "-1")),
        ("--rdzv-conf timeout=900", ("--rdzv-conf", "timeout=900")),  # passes none itself
        # Not torch 2.13's: left to each host's preflight, which judges every option.
        ("--max-nodes 2", ("--max-nodes", "2")),
        ("--rdzv-anything x", ("--rdzv-anything", "x")),
    ],
)
def test_parse_torchrun_args_allowed(text: str, words: tuple[str, ...]) -> None:
    assert parse_torchrun_args(text) == words


@pytest.mark.parametrize(
    ("text", "owned"),
    [
        ("--nnodes 3", "--nnodes"),
        ("--nnodes=3", "--nnodes"),
        ("--master_port=1", "--master-port"),
        ("--master-addr x", "--master-addr"),
        ("--master x", "--master-addr or --master-port"),
        ("--rdzv-backend c10d", "--rdzv-backend"),
        ("--rdzv_endpoint x:1", "--rdzv-endpoint"),
        ("--rdzv", "--rdzv-backend or --rdzv-endpoint"),
        ("--node 1", "--node-rank"),
        ("--node_rank 1", "--node-rank"),
        ("--nproc_per_node=8", "--nproc-per-node"),
        ("--nproc 8", "--nproc-per-node"),
        ("--log-dir /x", "--log-dir"),
        ("--redirects 3", "--redirects"),
        ("-r 3", "--redirects"),
        ("--tee 3", "--tee"),
        ("-t 3", "--tee"),
        ("--local-ranks-filter 0", "--local-ranks-filter"),
        ("--max-restarts 1 --nnodes 2", "--nnodes"),
    ],
)
def test_parse_torchrun_args_refuses_owned(text: str, owned: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"is set by clusterlaunch ({owned})")):
        parse_torchrun_args(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("--standalone", "would replace the static rendezvous clusterlaunch sets (--standalone)"),
        ("--run-p", "would run SCRIPT in torchrun's own process, not as clusterlaunch runs it"),
    ],
)
def test_parse_torchrun_args_refuses_what_would_replace_clusterlaunchs(text: str, why: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"--torchrun-args: {text} {why}")):
        parse_torchrun_args(text)


def test_parse_torchrun_args_unclosed_quote() -> None:
    with pytest.raises(UsageError, match=r"--torchrun-args '\"unclosed': No closing quotation"):
        parse_torchrun_args('"unclosed')


# --------------------------------------------------------------------------------------------- misc


def test_new_job_id_shape() -> None:
    moment = datetime.datetime(2024, 5, 6, 7, 8, 9)
    job_id = new_job_id(moment)
    assert re.fullmatch(r"cl-20240506-070809-[0-9a-f]{6}", job_id)
    assert len({new_job_id(moment) for _ in range(5)}) > 1


def test_probe_command_uses_the_job_prefix() -> None:
    inv = inventory(HostSpec(host="a", gpus=1, workdir="/w d", setup="true", env={"A": "1"}))
    node = plan(inv).nodes[0]
    command = probe_command(node, "10.0.0.1", 0, "n0nce", "train.py", True, 999, 42, "job7")
    probe_argv = [
        *commands.bootstrap_argv("python3", "probe", 999, site=False),
        "--master-addr", "10.0.0.1", "--nonce", "n0nce",
        "--timeout", f"{PROBE_DIAL_TIMEOUT_S:g}", "--listen", "0",
        "--script", "train.py", "--need-torch",
        "--job-id", "job7", "--node-rank", "0",
    ]  # fmt: skip
    # The same setup guard as the job's, with the nonce as the shell's token.
    setup = guarded("true", SetupGuard(42))
    assert command == f"cd -- '/w d' && {setup} && " + commands.exec_with(
        {"A": "1", JOB_ID_VAR: JOB}, probe_argv
    )
    assert shlex.split(commands.exec_with({"A": "1"}, probe_argv)) == [
        *setting({"A": "1"}),
        *probe_argv,
    ]
    bare = probe_command(node, "10.0.0.1", None, "n", None, False, 1, 42)
    tail = ["--master-addr", "10.0.0.1", "--nonce", "n", "--timeout", "5"]
    assert shlex.split(bare)[-6:] == tail


def test_python_default_is_python3_remotely_and_ours_for_localhost() -> None:
    from clusterlaunch.core.planner import python_for

    remote = HostSpec(host="gpu-a", gpus=1)
    local = HostSpec(host="localhost", gpus=1)
    assert python_for(remote, None, "/venv/bin/python") == "python3"
    assert python_for(local, None, "/venv/bin/python") == "/venv/bin/python"
    assert python_for(local, "/opt/py", "/venv/bin/python") == "/opt/py"
    explicit = HostSpec(host="localhost", gpus=1, python="/usr/bin/python3")
    assert python_for(explicit, None, "/venv/bin/python") == "/usr/bin/python3"


def test_forwarded_variables_are_found_once_for_all_hosts(monkeypatch) -> None:
    """They are the same for every host: once per plan, not per host (O(hosts x env) before)."""
    calls = []
    real = envpolicy.forwarded

    def counting(patterns, local_env):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(patterns, local_env)

    monkeypatch.setattr(envpolicy, "forwarded", counting)
    options = LaunchOptions(script="train.py", forward_env=("MY_*",))
    job = plan(inventory(*(HostSpec(host=f"h{i}", gpus=1) for i in range(5))), options,
               local_env={"MY_VAR": "1", "OTHER": "2"})  # fmt: skip
    assert len(calls) == 1
    assert all(node.env.get("MY_VAR") == "1" and "OTHER" not in node.env for node in job.nodes)
