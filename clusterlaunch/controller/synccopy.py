"""``--sync`` copies, one destination directory each: rsync, or file by file (SFTP, local).

Runs in worker threads; :meth:`Copier.cancel` (Ctrl-C, SIGTERM) kills every
rsync and stops every SFTP upload (removing its temporary file) at once; a
local copy ends after its current file. A controller that dies, SIGKILL too,
takes its rsyncs with it (``lifeline.py``).
"""

from __future__ import annotations

import os
import posixpath
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from clusterlaunch.controller.lifeline import Lifeline, kill_group
from clusterlaunch.core import commands, render
from clusterlaunch.core.errors import TransportError
from clusterlaunch.core.model import NodePlan
from clusterlaunch.core.syncplan import (
    RSYNC,
    RSYNC_MARK,
    SAME,
    RemoteEntry,
    SyncTask,
    Transfer,
    parse_rsync_report,
    plan_copy,
    transfer_of,
)
from clusterlaunch.core.syncsource import SourceTree
from clusterlaunch.transport import Connection, SshSettings, sshconfig
from clusterlaunch.transport.files import FileSink, open_files
from clusterlaunch.transport.openssh import multiplexed_ssh_argv

CANCEL_WAIT_S = 5.0
"""How long a cancel waits for the copies to clean up (a chunk and one removal)."""


@dataclass
class Copier:
    """Runs one :class:`SyncTask`; ``cancel`` stops every copy in progress."""

    tree: SourceTree
    connections: Mapping[str, Connection]
    ssh: SshSettings

    def __post_init__(self) -> None:
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._processes: list[subprocess.Popen[bytes]] = []
        self._sinks: list[FileSink] = []
        self._running = 0
        self._all_ended = threading.Condition(self._lock)

    def run(self, node: NodePlan, task: SyncTask) -> tuple[Transfer, float, str | None]:
        """(what was sent, seconds, error or None); never raises for a host's failure."""
        with self._lock:
            self._running += 1
        try:
            return self._run(node, task)
        finally:
            with self._lock:
                self._running -= 1
                self._all_ended.notify_all()

    def _run(self, node: NodePlan, task: SyncTask) -> tuple[Transfer, float, str | None]:
        started = time.monotonic()
        try:
            if task.method == SAME:
                transfer = Transfer()
            elif task.method == RSYNC:
                self._refuse_conflicts(node)
                transfer = self._rsync(node)
            else:
                sink = self._open(node)
                try:
                    transfer = self._copy(sink, node.workdir)
                finally:
                    sink.close()
        except TransportError as exc:
            return Transfer(), time.monotonic() - started, exc.detail
        return transfer, time.monotonic() - started, None

    def _rsync(self, node: NodePlan) -> Transfer:
        # Over the host's master connection with --ssh-client openssh; else its own.
        ssh = multiplexed_ssh_argv(self.connections[node.host]) or commands.ssh_argv(
            node.target,
            config_file=sshconfig.ssh_config_file(self.ssh.config_path),
            strict=node.target.key_policy(self.ssh.host_key_policy)[0] == "strict",
            connect_timeout=self.ssh.connect_timeout,
        )
        argv = commands.rsync_argv(ssh, node.target.alias, node.workdir, self.tree.root, RSYNC_MARK)
        with Lifeline() as lifeline:  # ends it (and its ssh) if we die, SIGKILL too
            with self._lock:
                if self._stopped.is_set():
                    raise TransportError(node.host, "cancelled")
                try:
                    # Its own session: a Ctrl-C reaches the controller only, which stops it.
                    process = lifeline.popen(
                        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
                    )
                except OSError as exc:
                    raise TransportError(node.host, f"cannot run rsync: {exc}") from None
                self._processes.append(process)
            out, err = process.communicate(self.tree.files_from())
        if process.returncode != 0:
            said = render.last_lines(err, 3)
            raise TransportError(node.host, f"rsync exited with {process.returncode}: {said}")
        return parse_rsync_report(out)

    def _refuse_conflicts(self, node: NodePlan) -> None:
        """A host path of another type than the source's (a file, or a link to a dataset,
        where the source has a directory): refused, as the SFTP copy refuses it. rsync
        replaced it without a word, deleting the host's file. One listing per directory,
        over SFTP; where the host has no SFTP, rsync goes on alone."""
        try:
            sink = self._open(node)
        except TransportError:
            return
        try:
            plan = plan_copy(self.tree, _survey(sink, sink.root(node.workdir), self.tree))
        finally:
            sink.close()
        if plan.conflicts:
            raise TransportError(node.host, "; ".join(plan.conflicts[:3]) + " (remove it there)")

    def _open(self, node: NodePlan) -> FileSink:
        with self._lock:
            if self._stopped.is_set():
                raise TransportError(node.host, "cancelled")
            sink = open_files(self.connections[node.host])
            self._sinks.append(sink)
        return sink

    def _copy(self, sink: FileSink, workdir: str) -> Transfer:
        root = sink.root(workdir)
        plan = plan_copy(self.tree, _survey(sink, root, self.tree))
        if plan.conflicts:
            raise TransportError(sink.host, "; ".join(plan.conflicts[:3]) + " (remove it there)")
        for directory in plan.mkdirs:
            sink.mkdir(posixpath.join(root, directory))
        for entry in plan.sends:
            if self._stopped.is_set():
                raise TransportError(sink.host, "cancelled")
            path = posixpath.join(root, entry.path)
            if entry.link is not None:
                sink.symlink(entry.link, path)
            else:
                local = os.path.join(self.tree.root, entry.path)
                sink.put(local, path, entry.mode, entry.mtime_ns)
        for entry in plan.chmods:
            sink.chmod(posixpath.join(root, entry.path), entry.mode)
        return transfer_of(plan)

    def cancel(self) -> None:
        """Stop now: kill every rsync, stop every SFTP upload (a large one too).

        Then wait (bounded) for the copies to end: an SFTP upload removes its
        temporary file when it notices the cancel, after its current chunk, and
        a controller exiting first left that file behind (1 run in 2 of the suite).
        """
        with self._lock:
            self._stopped.set()
            for process in self._processes:
                kill_group(process)  # the watcher, rsync and its ssh
            for sink in self._sinks:
                sink.cancel()
            self._all_ended.wait_for(lambda: self._running == 0, timeout=CANCEL_WAIT_S)


def _survey(sink: FileSink, root: str, tree: SourceTree) -> dict[str, RemoteEntry]:
    """What the destination holds where the source has entries: one listing per directory."""
    found: dict[str, RemoteEntry] = {}
    links = {entry.path for entry in tree.entries if entry.link is not None}
    for directory in ("", *tree.dirs):
        if directory and (directory not in found or found[directory].kind != "dir"):
            continue  # not there yet: nothing below it can be either
        listing = sink.listdir(posixpath.join(root, directory) if directory else root) or {}
        for name, entry in listing.items():
            path = f"{directory}/{name}" if directory else name
            if path in links and entry.kind == "link":
                entry = replace(entry, link=sink.readlink(posixpath.join(root, path)))
            found[path] = entry
    return found
