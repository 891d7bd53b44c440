"""Default settings: the one place each number is written (docs/cli.md shows them to users)."""

from typing import Any

GRACE_S = 5.0
"""Seconds between SIGTERM and SIGKILL when a job is torn down (``--grace``)."""

HEARTBEAT_TIMEOUT_S = 15.0
"""A host ends its part of the job after this long without hearing from the
controller (``--heartbeat-timeout``)."""

HEARTBEAT_INTERVAL_S = 1.0
"""How often the controller tells every agent it is still there."""

FANOUT = 64
"""Parallel connections and channel opens (``--fanout``)."""

CONNECT_TIMEOUT_S = 10.0
"""Seconds for one host's TCP connect and SSH handshake (``--connect-timeout``)."""

SSH_CLIENTS = ("paramiko", "openssh")
SSH_CLIENT = "paramiko"
"""Which client makes the SSH connections (``--ssh-client``, ``ssh_client:``); paramiko
by the measurements in docs/benchmarks.md."""

GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
"""The known_hosts files every host's key is also looked up in when the SSH config names
no ``GlobalKnownHostsFile`` (ssh's default: ``ssh -G``, OpenSSH 9.2)."""

RSA_MINIMUM_BITS = 1024
"""The smallest RSA key ssh uses or accepts from a server, whatever RequiredRSASize says
(SSH_RSA_MINIMUM_MODULUS_SIZE; RequiredRSASize's default, ``ssh -G``, OpenSSH 9.2)."""

SYSTEM_SSH_CONFIG = "/etc/ssh/ssh_config"
"""The system-wide client config ssh reads after ``~/.ssh/config`` (not under ``-F``)."""

KEEPALIVE_INTERVAL_S = 1.0
"""How often each SSH connection asks its server for a keepalive reply."""

DEAD_AFTER_S = 6.0
"""A host whose connection answers no keepalive for this long is lost."""

PROBE_DIAL_TIMEOUT_S = 5.0
"""The preflight probe's wait for node 0's master port to answer its nonce."""

PREFLIGHT_TIMEOUT_S = 60.0
"""The whole preflight pass, every host at once (plus the setup timeout for hosts with a setup)."""

GO_SLACK_S = 60.0
"""How long past the preflight's own bound a ``run`` agent waits for its go: re-planning
(``gpus: auto``) and opening the log files come in between."""

SETUP_TIMEOUT_S = 300.0
"""Seconds a host's ``setup:`` may run before it is stopped (``--setup-timeout``)."""

RESTART_BACKOFF_S = 3.0
"""Seconds before the first restart of a failed job (``--restart-backoff``); doubled after
each further restart, so a host that keeps failing is not hammered."""

RESTART_BACKOFF_MAX_S = 60.0
"""The longest wait between two restarts, however many there were."""

CHILDREN_END_WAIT_S = GRACE_S + 5.0
"""How long closing ``localhost`` or a Slurm node waits for the commands it started
(local children: its agents, probes, srun steps) to end after their stdin's EOF.

A probe ends within ~1 s of it under load here, an agent after its own teardown
(up to the grace); until then a controller that had exited left them behind.
Past this they get SIGTERM (srun's kills its step)."""

KILL_WAIT_S = 60.0
"""How long ``clusterlaunch kill`` waits on each host for the job to be gone."""

DOCTOR_PAIR_TIMEOUT_S = 5.0
"""``doctor``: seconds one host may take to connect to another's ephemeral port."""

DOCTOR_CLOCK_SKEW_S = 1.0
"""``doctor`` warns about a host clock further than this from the controller's."""

DOCTOR_MIN_FREE_DISK = 1 << 30
"""``doctor`` warns when the workdir has less free space than this (bytes)."""

RANK_FILES_MIN_FREE = 64 << 20
"""The free space (bytes) a torchrun job wants where each host keeps its per-rank files
(``/tmp/clusterlaunch-UID``): the preflight fails below it, ``doctor`` warns. The agent
empties the files behind its reads, so they hold only what is not sent yet: little while
the controller keeps up, more while it falls behind (the agent stops reading while 8 MiB
wait in its own queue), and whatever else fills /tmp meanwhile shares the rest."""

DOCTOR_TPUT_BYTES = 64 << 20
"""``doctor --bandwidth``: bytes sent over each ordered pair's TCP connection."""

DOCTOR_BENCH_TIMEOUT_S = 600.0
"""``doctor --bandwidth``: the all_reduce job's ``--timeout``."""

DOCTOR_SIZES = tuple(1024 * 4**i for i in range(9))
"""``doctor --bandwidth``: all_reduce sizes in bytes, 1 KiB to 64 MiB (factor 4)."""

STALL_ACTIONS = ("stacks", "kill")
"""``run --stall-action``: what happens when no rank printed for ``--stall-timeout`` s."""

PAYLOAD_KEPT_S = 7 * 24 * 3600.0
"""A remote program's payload in the user's cache (``remote.program_payload``) is removed
when another source's payload of that program is stored and it was written longer ago
than this: two installs of different versions used in turn each keep theirs, and a
checkout whose agent is edited leaves a week's payloads at most."""

SANDBOX_DIR = ".sandbox"
"""Where ``clusterlaunch sandbox up`` keeps its simulated hosts."""

SANDBOX_HOSTS = 3

SANDBOX_MAX_HOSTS = 64
"""Loopback addresses 127.0.0.11 and up, one sshd each."""

SANDBOX_FIRST_PORT = 22220
"""The first sshd port the simulated cluster tries (``clusterlaunch.testing.DEFAULT_PORT``)."""


# Every subcommand's namespace carries these, so the command line's shared code
# reads plain attributes (cli/parser.py sets them before each command's flags).
SHARED_ATTRIBUTES: dict[str, Any] = {
    "python": None,
    "workdir": None,
    "script": None,
    "log_dir": None,
    "env": (),
    "forward_env": (),
    "torchrun_args": "",
    "job_id": None,
    "master_port": None,
    "master_addr": None,
    "transport": None,
    "gpus_per_host": None,
    "json": False,
    "dry_run": False,
    "ranks": None,
    "timeout": None,
    "fail_fast": False,
    "sync": False,
    "grace": GRACE_S,
    "heartbeat_timeout": HEARTBEAT_TIMEOUT_S,
    "setup_timeout": SETUP_TIMEOUT_S,
    "passthrough": (),
    "env_file": (),
    "include": None,
    "exclude": None,
    "module": False,
    "no_python": False,
    "max_restarts": None,
    "restart_backoff": RESTART_BACKOFF_S,
    "min_hosts": None,
    "stall_timeout": None,
    "stall_action": "stacks",
}
