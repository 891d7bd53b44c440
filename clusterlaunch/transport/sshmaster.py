"""Establish the OpenSSH master connections of a job, all at once.

Every master is spawned from the calling thread (the controller's main thread)
and watched by one loop (:mod:`sshready`), without a thread per host: up when its
control socket appears, failed when it exits (its stderr, in a :mod:`sshlog` file,
says why). Spawned from the main thread: with ``setpriv --pdeathsig`` the kernel
ends a master when its spawning thread ends, so a killed controller leaves none.

Transient failures (a reset during the handshake, a server that closed before its
banner: sshd's ``MaxStartups`` does that to bursts) are retried with backoff, a
bounded number of times, each retry noted. Hosts behind a ProxyJump reach its first
hop through one shared master connection to it (``ssh -W`` over it), so 64 targets
make one bastion login; later hops of a chain (``ProxyJump a,b``) are each target's.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from clusterlaunch.core import commands
from clusterlaunch.core.errors import HostProblem, TransportError, UsageError
from clusterlaunch.core.model import SshTarget
from clusterlaunch.core.sshargv import Keepalive, Mux, ssh_argv
from clusterlaunch.transport import controldir, proclimit, sshconfig
from clusterlaunch.transport.openssh import OpenSshConnection, stop_process
from clusterlaunch.transport.settings import SshSettings
from clusterlaunch.transport.sshlog import MasterLog
from clusterlaunch.transport.sshready import Arrivals

_POLL_S = 0.01


@dataclass(frozen=True)
class MasterSettings:
    """What every master of the job shares."""

    config_file: str | None  # ssh's -F; None: its own defaults
    connect_timeout: float
    keepalive: Keepalive
    policy_override: str | None
    config_path: str | None
    pdeathsig: tuple[str, ...] = ()  # /usr/bin/setpriv --pdeathsig TERM --: a master dies with us
    ssh: str = "ssh"  # its path, looked up once: else Popen searches PATH at every spawn


@dataclass(eq=False)
class _Master:
    """One master being established: the host, or a shared jump host."""

    key: str
    target: SshTarget
    socket: str
    jump: _Master | None = None
    hops: tuple[SshTarget, ...] = ()  # ProxyJump a,b,c: jump is the shared master to a; b, c
    attempt: int = 0
    not_before: float = 0.0
    popen: subprocess.Popen[bytes] | None = None
    log: MasterLog | None = None  # the running attempt's stderr; a connection takes it over
    deadline: float = 0.0  # TCP connect, key exchange, login: each may take the timeout
    error: TransportError | None = None
    users: list[_Master] = field(default_factory=list)
    up: bool = False  # its control socket is in place: it is authenticated

    @property
    def ready(self) -> bool:
        return self.popen is not None and self.error is None and self.up


def connect_all(
    targets: Sequence[SshTarget],
    ssh: SshSettings,
    fanout: int,
    note: Callable[[str], None],
    progress: Callable[[str], None],
) -> tuple[dict[str, OpenSshConnection], list[HostProblem]]:
    """A master per target (and per shared jump host); connections and failures by alias.

    ``progress`` hears each target's alias as its master comes up (jump hosts are not targets).
    """
    interval = max(1, round(ssh.keepalive_interval))
    setpriv, client = shutil.which("setpriv"), shutil.which("ssh")
    settings = MasterSettings(
        config_file=sshconfig.ssh_config_file(ssh.config_path),
        connect_timeout=ssh.connect_timeout,
        keepalive=Keepalive(interval, max(1, math.ceil(ssh.dead_after / interval))),
        policy_override=ssh.host_key_policy,
        config_path=ssh.config_path,
        pdeathsig=(setpriv, "--pdeathsig", "TERM", "--") if setpriv else (),
        ssh=client or "ssh",
    )
    if not targets:
        return {}, []
    if client is None:
        raise UsageError("--ssh-client openssh needs the OpenSSH client (ssh) on PATH")
    control = controldir.ControlDir()
    control.hold()  # until the connections exist: then each holds it
    masters = _plan(targets, settings, control)
    try:
        _establish(masters, settings, fanout, note, progress, Arrivals(control.path))
        return _connections(masters, settings, control)
    except BaseException:
        for master in masters:
            if master.popen is not None:
                stop_process(master.popen)
        raise
    finally:
        for log in [m.log for m in masters if m.log]:  # failed, jump hosts: not needed now
            log.close()
        control.release()


def _plan(
    targets: Sequence[SshTarget], settings: MasterSettings, control: controldir.ControlDir
) -> list[_Master]:
    """Jump hosts first (their users wait for them), then every target."""
    jumps: dict[str, _Master] = {}
    masters: list[_Master] = []
    config = None
    for index, target in enumerate(targets):
        master = _Master(target.alias, target, control.file(f"{index}"))
        if target.proxy_jump:
            hop, *later = target.proxy_jump.split(",")
            config = config or sshconfig.read_ssh_config(settings.config_path)
            if hop not in jumps:
                jump = sshconfig.jump_host(config, hop)
                name = f"j{len(jumps)}"
                jumps[hop] = _Master(hop, jump, control.file(name))
            master.jump = jumps[hop]
            master.hops = tuple(sshconfig.jump_host(config, name) for name in later)
            jumps[hop].users.append(master)
        masters.append(master)
    return [*jumps.values(), *masters]


_TO = "[%h]:%p"  # as ssh's own ProxyJump writes it: "-W ::1:22" is a bad specification


def _argv(master: _Master, settings: MasterSettings, mux: Mux) -> list[str]:
    target = master.target
    strict = target.key_policy(settings.policy_override)[0] == "strict"
    proxy = None
    if master.jump is not None:
        via = _argv(master.jump, settings, Mux(master.jump.socket))
        proxy = commands.proxy_command([*via, "-W", _TO, "--", master.jump.target.alias])
        for hop in master.hops:  # each later hop through the one before, per target
            proxy = _through(hop, proxy, settings)
    return ssh_argv(
        target,
        config_file=settings.config_file,
        strict=strict,
        connect_timeout=settings.connect_timeout,
        mux=mux,
        keepalive=settings.keepalive,
        proxy_command=proxy,
    )


def _through(hop: SshTarget, proxy: str, settings: MasterSettings) -> str:
    """A ProxyCommand that reaches ``%h:%p`` through ``hop``, itself reached by ``proxy``,
    which is an option of the hop's ssh inside it: its ``%`` doubled, so the outer ssh
    leaves ``%h:%p`` for the hop's ssh (its own address)."""
    argv = ssh_argv(
        hop,
        config_file=settings.config_file,
        strict=hop.key_policy(settings.policy_override)[0] == "strict",
        connect_timeout=settings.connect_timeout,
        proxy_command=proxy.replace("%", "%%"),
    )
    return commands.proxy_command([*argv, "-W", _TO, "--", hop.alias])


def _establish(
    masters: list[_Master],
    settings: MasterSettings,
    fanout: int,
    note: Callable[[str], None],
    progress: Callable[[str], None],
    arrivals: Arrivals,
) -> None:
    waiting = list(masters)
    running: list[_Master] = []
    while waiting or running:
        now = time.monotonic()
        for master in list(waiting):
            if len(running) >= fanout:
                break
            if master.jump is not None and master.jump.error is not None:
                master.error = TransportError(master.key, f"jump host {master.jump.key}: "
                                              f"{master.jump.error.detail}")  # fmt: skip
                waiting.remove(master)
            elif now >= master.not_before and (master.jump is None or master.jump.ready):
                _spawn(master, settings)
                waiting.remove(master)
                if master.error is None:  # else it could not be run: failed for good
                    running.append(master)
        arrivals.look()
        for master in arrivals.due(running):
            if _settled(master, settings, note, arrivals):
                running.remove(master)
                if master.error is None and master.popen is None:
                    waiting.append(master)  # a retry, after its backoff
                elif master.error is None and not master.users:  # a target, not a jump host
                    progress(master.key)
        time.sleep(_POLL_S)


def _spawn(master: _Master, settings: MasterSettings) -> None:
    argv = _argv(master, settings, Mux(master.socket, master=True))
    argv += ["-N", "--", master.target.alias]
    timeout = master.target.connect_timeout or settings.connect_timeout
    if master.log is not None:
        master.log.close()  # an earlier attempt's
    try:
        master.log = MasterLog()
        master.popen = subprocess.Popen(
            [*settings.pdeathsig, *argv],
            executable=None if settings.pdeathsig else settings.ssh,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=master.log.fileno(),
            start_new_session=True,  # a Ctrl-C reaches us; we end it
        )
    except OSError as exc:
        master.error = TransportError(master.key, f"cannot run ssh: {proclimit.fork_failure(exc)}")
        return
    master.deadline = time.monotonic() + 3 * timeout


def _settled(
    master: _Master, settings: MasterSettings, note: Callable[[str], None], arrivals: Arrivals
) -> bool:
    """True once ``master`` is up, failed for good, or due for a retry (popen None)."""
    master.up = master.up or arrivals.up(master.socket)
    if master.ready:  # a running master has no error: a failed spawn never runs
        return True
    from clusterlaunch.transport import sshfailure  # only now: 2 ms of a start that needs none

    popen = master.popen
    assert popen is not None
    if not arrivals.child_ended or popen.poll() is None:
        if not arrivals.past_deadline(master.deadline):
            return False
        stop_process(popen)
        timeout = master.target.connect_timeout or settings.connect_timeout
        master.error = TransportError(master.key, sshfailure.timed_out(master.target, timeout))
        return True
    said = master.log.said() if master.log is not None else ""
    failure = sshfailure.classify(master.target, said, settings.policy_override)
    if isinstance(failure, sshfailure.Transient) and master.attempt < sshfailure.RETRIES:
        delay = sshfailure.backoff(master.attempt)
        master.attempt += 1
        note(sshfailure.retry_note(master.key, failure.detail, master.attempt, delay))
        master.popen = None
        master.not_before = time.monotonic() + delay
        return True
    master.error = failure.error(master.key)
    return True


def _connections(
    masters: list[_Master], settings: MasterSettings, control: controldir.ControlDir
) -> tuple[dict[str, OpenSshConnection], list[HostProblem]]:
    connections: dict[str, OpenSshConnection] = {}
    problems: list[HostProblem] = []
    for master in masters:
        if master.users:  # a jump host: lives while a connection behind it does
            continue
        if master.error is not None:
            problems.append(HostProblem(master.key, "connect", master.error.detail))
            continue
        assert master.popen is not None
        control.hold()
        log, master.log = master.log, None  # the connection's now
        argv = _argv(master, settings, Mux(master.socket))
        connections[master.key] = OpenSshConnection(
            master.key, master.popen, argv, _closer(master, control), log, settings.ssh
        )
    for jump in (m for m in masters if m.users):
        # It lives as long as the connections behind it; none: it goes now.
        jump.users = [user for user in jump.users if user.key in connections]
        if not jump.users and jump.popen is not None:
            stop_process(jump.popen)
    return connections, problems


def _closer(master: _Master, control: controldir.ControlDir) -> Callable[[], None]:
    def close() -> None:
        jump = master.jump
        if jump is not None:
            jump.users.remove(master)
            if not jump.users and jump.popen is not None:
                stop_process(jump.popen)
        control.release()

    return close
