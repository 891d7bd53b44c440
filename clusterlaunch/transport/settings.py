"""Connection settings of a job's SSH hosts: paramiko-free, so the OpenSSH client's path
(and the command line, which names the choices) does not import paramiko (42 ms of a
105 ms start-up import on this machine, measured with ``python -X importtime``)."""

from __future__ import annotations

from dataclasses import dataclass

from clusterlaunch.core import defaults

POLICIES = ("strict", "accept-new")
CLIENTS = defaults.SSH_CLIENTS


@dataclass(frozen=True)
class SshSettings:
    """Connection settings shared by every host of a job."""

    host_key_policy: str | None = None
    """strict / accept-new; ``None``: the SSH config's StrictHostKeyChecking, else accept-new."""
    connect_timeout: float = defaults.CONNECT_TIMEOUT_S
    keepalive_interval: float = defaults.KEEPALIVE_INTERVAL_S
    dead_after: float = defaults.DEAD_AFTER_S
    """A host that answers no keepalive for this long is lost."""
    config_path: str | None = None
    client: str = defaults.SSH_CLIENT
    """``paramiko`` (in process) or ``openssh`` (the system ssh, one master per host)."""
