"""Frozen data that flows through the launcher: hosts file → plan → remote commands.

Everything here is plain data with no behaviour beyond derived properties and
one update, filling in the master port that ``auto`` left open (the commands
re-rendered by :mod:`clusterlaunch.core.commands`), so the parser, the planner
and the command builder can be tested by equality.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from clusterlaunch.core import commands, defaults, envpolicy
from clusterlaunch.core.setupguard import SetupGuard

LOCALHOST = "localhost"
"""The one destination that runs through the local transport instead of SSH."""

ScriptKind = Literal["file", "module", "program"]
"""How torchrun starts SCRIPT: ``python FILE``, ``python -m MODULE`` (``-m``), or the
program itself (``--no-python``)."""


@dataclass(frozen=True)
class HostSpec:
    """One entry of the hosts file, with ``defaults`` already merged in."""

    host: str
    gpus: int | None
    """Processes torchrun starts here; ``None``: ``auto``, the accelerators the
    preflight finds (:mod:`clusterlaunch.core.accelerators`)."""
    user: str | None = None
    port: int | None = None
    python: str | None = None
    """``None``: not set in the file (the planner picks ``python3``, or for
    ``localhost`` the controller's own interpreter)."""
    workdir: str | None = None
    setup: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[int, ...] | None = None
    addr: str | None = None
    line: int | None = None
    """Line of this entry in the hosts file, for error messages."""
    entry: int | None = None
    """Index of this entry in the file's ``hosts:`` list (``hosts[N]`` in messages);
    ``None`` for an MPI hostfile's line, which messages name by its line alone."""
    accelerator: str | None = None
    """``cuda``, ``rocm`` or ``npu``; ``None``: whatever the preflight detects."""
    spare: bool = False
    """``spare: true``: idle until a restart needs it in a lost host's place."""

    @property
    def is_local(self) -> bool:
        """True when this host runs through the local transport."""
        return self.host == LOCALHOST


@dataclass(frozen=True)
class Inventory:
    """A parsed, validated hosts file."""

    path: str
    hosts: tuple[HostSpec, ...]
    master_port: int | None = None
    """``None`` means ``auto``: a free port is chosen on node 0 at launch."""
    master_addr: str | None = None
    notes: tuple[str, ...] = ()
    """What the command line changed (``--include``, ...), shown with the dry-run plan."""
    max_restarts: int | None = None
    """``max_restarts:`` (``--max-restarts`` wins); ``None``: not set."""
    ssh_client: str | None = None
    """``ssh_client:`` (paramiko or openssh); ``None``: not set, ``--ssh-client`` or the default."""
    mpi: bool = False
    """Read from an MPI hostfile: its fixes are flags, not YAML keys it cannot hold."""
    node0_moved: str | None = None
    """Why node 0 is not the first host of the file: what left out the hosts listed before
    it (``--exclude node0 leaves out node0``); ``None``: it is the first."""

    def narrowed(self, hosts: tuple[HostSpec, ...], cause: str) -> Inventory:
        """Only ``hosts`` (a subset, in this order, or spares in their places), ``cause``
        (``--exclude node0``, ``this restart``) named for the hosts listed before the new
        first one that it left out (spares aside: ``run`` sets them apart), which
        :func:`~clusterlaunch.core.planner.choose_master_addr` may have to say."""
        names = [spec.host for spec in self.hosts if not spec.spare]
        first = next((spec.host for spec in hosts if not spec.spare), None)
        left_out = names[: names.index(first)] if first in names else names[:1]
        if not left_out:
            return replace(self, hosts=hosts)
        shown = ", ".join(left_out[:3]) + (f" and {len(left_out) - 3} more" if left_out[3:] else "")
        return replace(self, hosts=hosts, node0_moved=f"{cause} leaves out {shown}")


@dataclass(frozen=True)
class SshTarget:
    """Where and how to reach one host, resolved through the SSH config.

    ``alias`` is the destination as written in the hosts file; ``hostname`` is
    what it resolves to (``HostName``), which is also what peers should use
    when no ``addr`` is given.
    """

    alias: str
    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    use_agent: bool = True
    """False for ``IdentityAgent none``: ssh then asks no agent for keys."""
    address_family: str = "any"
    """The config's ``AddressFamily`` (``any``, ``inet``, ``inet6``): which addresses to dial."""
    known_hosts_files: tuple[str, ...] = ()
    global_known_hosts_files: tuple[str, ...] = defaults.GLOBAL_KNOWN_HOSTS
    hash_known_hosts: bool = False
    """The config's ``HashKnownHosts yes``: a recorded key's host name is written hashed."""
    proxy_jump: str | None = None
    proxy_command: str | None = None
    connect_timeout: float | None = None
    connection_attempts: int = 1
    """The config's ``ConnectionAttempts``: TCP connects tried, a second apart."""
    host_key_checking: str | None = None
    """The config's ``StrictHostKeyChecking``, used when ``--host-key-policy`` is not given."""
    algorithms: tuple[tuple[str, str], ...] = ()
    """The config's algorithm lists that are set (``Ciphers``, ``MACs``, ``KexAlgorithms``,
    ``HostKeyAlgorithms``), as (keyword, value): see :mod:`clusterlaunch.core.sshalgorithms`."""
    required_rsa_size: int = defaults.RSA_MINIMUM_BITS
    """The config's ``RequiredRSASize`` (at least 1024): smaller RSA keys are not used,
    nor accepted from the server."""
    forward_agent: bool = False
    """The config's ``ForwardAgent yes``."""
    send_env: tuple[str, ...] = ()
    """The config's ``SendEnv`` patterns, every line's, ``-PATTERN`` removals applied."""
    set_env: tuple[tuple[str, str], ...] = ()
    """The config's ``SetEnv`` (its first line, as ssh takes it), as (name, value)."""
    session_keywords: tuple[str, ...] = ()
    """Session-only keywords the config sets for the host (``forkafterauthentication``,
    ``stdinnull``, ``sessiontype``, lowercase): ssh's command line overrides them
    (:mod:`clusterlaunch.core.sshargv`), naming only those this ssh is known to read."""
    given: tuple[str, ...] = ()
    """``user``/``port`` where the hosts file (or a ``ProxyJump`` hop) gave them, as ssh's
    ``-l``/``-p`` would: only those go to ssh on its command line, the rest it reads."""

    @property
    def is_local(self) -> bool:
        """True for the local transport (no SSH at all)."""
        return self.alias == LOCALHOST

    def sent_environment(self, local_env: Mapping[str, str]) -> dict[str, str]:
        """What ssh sends each session to this host (SendEnv, SetEnv): see envpolicy."""
        return envpolicy.sent_by_ssh(self.send_env, self.set_env, local_env)

    def key_policy(self, override: str | None) -> tuple[str, str]:
        """(``strict`` or ``accept-new``, where that came from) for this host's key.

        ``--host-key-policy`` wins, else the config's StrictHostKeyChecking
        (``yes``/``ask`` are strict: nobody can answer a prompt here). ``no``
        and ``off`` are not honoured: clusterlaunch never skips the check.
        """
        if override:
            return override, f"--host-key-policy {override}"
        configured = (self.host_key_checking or "").lower()
        if configured in ("yes", "ask"):
            return "strict", f"StrictHostKeyChecking {configured} in the SSH config"
        if configured == "accept-new":
            return "accept-new", "StrictHostKeyChecking accept-new in the SSH config"
        if configured in ("no", "off"):
            return (
                "accept-new",
                f"StrictHostKeyChecking {configured} in the SSH config, as accept-new",
            )
        return "accept-new", "the default, accept-new"

    @property
    def label(self) -> str:
        """Short name used in prefixes and tables."""
        return self.alias


@dataclass(frozen=True)
class LaunchOptions:
    """What the command line adds to the hosts file for one launch."""

    script: str
    script_args: tuple[str, ...] = ()
    script_kind: ScriptKind = "file"
    env: tuple[tuple[str, str], ...] = ()
    """``--env KEY=VALUE`` in command-line order (later wins)."""
    forward_env: tuple[str, ...] = ()
    """``--forward-env`` glob patterns."""
    master_port: int | None = None
    master_port_auto: bool = False
    """``--master-port auto`` given explicitly (overrides a number in the file)."""
    python: str | None = None
    workdir: str | None = None
    torchrun_args: tuple[str, ...] = ()
    grace: float = defaults.GRACE_S
    heartbeat_timeout: float = defaults.HEARTBEAT_TIMEOUT_S
    setup_timeout: float = defaults.SETUP_TIMEOUT_S


@dataclass(frozen=True)
class NodePlan:
    """Everything one host needs to run its part of the job."""

    node_rank: int
    host: str
    target: SshTarget
    addr: str
    nproc: int | None
    """``None`` while the host's ``gpus: auto`` is unresolved (a dry run)."""
    first_rank: int | None
    """``None`` when an earlier node's ``gpus: auto`` is unresolved."""
    env: Mapping[str, str]
    workdir: str
    python: str
    setup: str | None
    argv: tuple[str, ...]
    """The job's own argv on this host (``python -m torch.distributed.run ...``)."""
    command: str
    """The exact shell command sent to the host."""
    agent_argv: tuple[str, ...]
    """The agent's own argv: the command runs it, with ``--`` and :attr:`argv` after it."""
    setup_guard: SetupGuard
    """How the command runs ``setup`` (its time limit, its token)."""
    devices: tuple[int, ...] | None = None
    accelerator: str | None = None

    @property
    def global_ranks(self) -> tuple[int, ...]:
        """Global ranks torchrun's static rendezvous gives this node (none while unresolved)."""
        if self.first_rank is None or self.nproc is None:
            return ()
        return tuple(range(self.first_rank, self.first_rank + self.nproc))

    def with_master_port(self, port: int) -> NodePlan:
        """This node with torchrun's ``AUTO`` port word replaced by ``port``, re-rendered."""
        argv = tuple(commands.fill_master_port(self.argv, port))
        command = commands.agent_command(
            self.workdir, self.setup, self.env, self.agent_argv, argv, self.setup_guard
        )
        return replace(self, argv=argv, command=command)

    def rank_of(self, local_rank: int) -> int:
        """The global rank of this node's ``local_rank``."""
        if self.first_rank is None:
            raise ValueError(f"node {self.node_rank}'s ranks are not resolved yet")
        return self.first_rank + local_rank


@dataclass(frozen=True)
class JobPlan:
    """The whole job: rank table, rendezvous point and per-host commands."""

    job_id: str
    world_size: int | None
    """``None`` while some host's ``gpus: auto`` is unresolved."""
    master_addr: str
    master_port: int | None
    """``None`` until ``auto`` has been resolved on node 0."""
    nodes: tuple[NodePlan, ...]
    notes: tuple[str, ...] = ()

    def with_master_port(self, port: int) -> JobPlan:
        """The plan with ``master_port: auto`` resolved to ``port`` (the preflight found it free).

        Equal to planning with that port from the start (a unit test checks).
        """
        nodes = tuple(node.with_master_port(port) for node in self.nodes)
        return replace(self, master_port=port, nodes=nodes)

    def node_of_rank(self, rank: int) -> NodePlan:
        """The node that runs global rank ``rank``."""
        for node in self.nodes:
            if rank in node.global_ranks:
                return node
        raise KeyError(rank)
