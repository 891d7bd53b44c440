"""Loopback clusters set up the way real sites set up SSH.

* ``host_ca``: a host CA (``ssh-keygen -s``) signs every host key, sshd serves
  the certificate (``HostCertificate``), and known_hosts holds nothing but the
  ``@cert-authority`` line (Teleport, step-ca, Vault do this).
* ``user_ca``: a user CA signs the client key; sshd trusts it through
  ``TrustedUserCAKeys`` with no authorized_keys at all; the client config
  names the certificate with ``CertificateFile``.
* ``include``: the client config is one ``Include`` line; each host's block is
  its own file under ``ssh_config.d/`` (as cloud and cluster tools generate).
* ``max_startups``: sshd's ``MaxStartups`` (e.g. ``10:30:60``, a bastion's
  defence against bursts of connections).
* ``default_kex``: neither side pins ``KexAlgorithms``: the servers' default key
  exchange, as real servers have it.
* ``count_connections``: sshd at ``LogLevel VERBOSE``, which logs a ``Connection
  from`` line for every TCP connection it accepts (:meth:`connections_to` counts
  them): how many connections a host really saw, by the server's own account.
* ``ciphers``, ``macs``: sshd offers only these ciphers (``Ciphers``), MACs (``MACs``).
* ``log_ciphers``: sshd at ``LogLevel DEBUG1``, which logs the cipher each
  connection agreed on (:meth:`ciphers_used`).
* ``accept_env``: sshd's ``AcceptEnv`` (Debian's sshd has ``LANG LC_*``): the
  variables a client's ``SendEnv``/``SetEnv`` may set in a session.
* ``rsa_host_key``: every host also has an RSA host key of this many bits, the only
  one known_hosts records, and the client config asks for RSA host keys only.
* ``gssapi``: sshd takes Kerberos logins (``GSSAPIAuthentication``), with the
  keytab ``KRB5_KTNAME`` names when it starts (tests/kdc.py makes one).
* ``x11``: sshd forwards X11 for a client that asks (``ForwardX11``), setting the
  session's ``DISPLAY`` (it needs ``xauth`` on the host).
* ``session_env``: more of sshd's ``SetEnv`` for every session (``BASH_ENV=FILE``: a
  file bash reads before every command, as a site's environment setup may, printing).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from clusterlaunch.testing.loopback import LoopbackCluster
from clusterlaunch.testing.sshd import SimClusterError


class SshVariantCluster(LoopbackCluster):
    """A :class:`LoopbackCluster` with certificates, Include, MaxStartups or default kex."""

    def __init__(
        self,
        n_hosts: int,
        base_dir: str | os.PathLike[str],
        *,
        host_ca: bool = False,
        user_ca: bool = False,
        include: bool = False,
        max_startups: str | None = None,
        default_kex: bool = False,
        count_connections: bool = False,
        ciphers: str | None = None,
        macs: str | None = None,
        log_ciphers: bool = False,
        accept_env: str | None = None,
        gssapi: bool = False,
        rsa_host_key: int | None = None,
        x11: bool = False,
        session_env: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(n_hosts, base_dir, **kwargs)
        self.more_env += f" {session_env}" if session_env else ""  # NAME=VALUE ..., no spaces
        self.host_ca = host_ca
        self.user_ca = user_ca
        self.include = include
        self.max_startups = max_startups
        self.default_kex = default_kex
        self.count_connections = count_connections
        self.ciphers = ciphers
        self.macs = macs
        self.log_ciphers = log_ciphers
        self.accept_env = accept_env  # sshd's AcceptEnv patterns
        self.gssapi = gssapi
        self.rsa_host_key = rsa_host_key  # bits of an RSA host key, the one clients get
        self.x11 = x11  # sshd forwards X11 where a client asks (xauth on the host)
        self.host_ca_key = self.base_dir / "host_ca"
        self.user_ca_key = self.base_dir / "user_ca"
        self.include_dir = self.base_dir / "ssh_config.d"

    def _write_files(self) -> None:
        super()._write_files()
        if self.default_kex:
            self._edit_sshd(lambda text: _drop(text, "KexAlgorithms"))
            self.ssh_config.write_text(_drop(self.ssh_config.read_text(), "KexAlgorithms"))
        if self.max_startups:
            line = f"MaxStartups {self.max_startups}"
            self._edit_sshd(lambda text: re.sub(r"(?m)^MaxStartups .*$", line, text))
        if self.count_connections:
            self._edit_sshd(lambda text: text + "LogLevel VERBOSE\n")
        if self.ciphers:
            self._edit_sshd(lambda text: text + f"Ciphers {self.ciphers}\n")
        if self.macs:
            self._edit_sshd(lambda text: text + f"MACs {self.macs}\n")
        if self.log_ciphers:
            self._edit_sshd(lambda text: text + "LogLevel DEBUG1\n")
        if self.accept_env:
            self._edit_sshd(lambda text: text + f"AcceptEnv {self.accept_env}\n")
        if self.rsa_host_key:
            self._rsa_host_keys(self.rsa_host_key)
        if self.x11:
            self._edit_sshd(lambda text: text + "X11Forwarding yes\nX11UseLocalhost yes\n")
        if self.gssapi:  # any key of the keytab (KRB5_KTNAME when started), not the host's
            gss = "GSSAPIAuthentication yes\nGSSAPIStrictAcceptorCheck no\n"
            self._edit_sshd(lambda text: text + gss)
        if self.host_ca:
            self._sign_hosts()
        if self.user_ca:
            self._sign_client()
        if self.include:
            self._split_config()

    def _wait_ready(self) -> None:
        super()._wait_ready()
        if not self.count_connections:
            return
        # The readiness check's own connection is logged by sshd's child a moment
        # later: wait for it, so that a count taken from now on includes it.
        deadline = time.monotonic() + self.ready_timeout
        while any(self.connections_to(h.name) == 0 for h in self.hosts):
            if time.monotonic() > deadline:
                raise SimClusterError("sshd logged no connection for the readiness check")
            time.sleep(0.05)

    def connections_to(self, name: str) -> int:
        """TCP connections host ``name``'s sshd has accepted so far (``count_connections``)."""
        return len(re.findall(r"(?m)Connection from \S+ port \d+ on ", self._sshd_log(name)))

    def ciphers_used(self, name: str) -> list[str]:
        """The cipher of each connection to host ``name`` so far, server to client
        (``log_ciphers``)."""
        return re.findall(r"(?m)kex: server->client cipher: (\S+)", self._sshd_log(name))

    def _sshd_log(self, name: str) -> str:
        return (self.host(name).host_dir / "sshd.log").read_text(errors="replace")

    def _edit_sshd(self, edit: Any) -> None:
        for host in self.hosts:
            conf = host.host_dir / "sshd_config"
            conf.write_text(edit(conf.read_text()))

    def _sign_hosts(self) -> None:
        _keygen(self.host_ca_key)
        for host in self.hosts:
            key = host.host_dir / "ssh_host_ed25519_key"
            # ssh checks the name it connects to (HostName) against the principals.
            _run(["ssh-keygen", "-q", "-s", str(self.host_ca_key), "-I", host.name, "-h",
                  "-n", f"{host.addr},{host.name}", f"{key}.pub"])  # fmt: skip
            cert = f"{key}-cert.pub"
            self._append(host.host_dir / "sshd_config", f"HostCertificate {cert}\n")
        ca = self.host_ca_key.with_suffix(".pub").read_text().split()[:2]
        self.known_hosts.write_text(f"@cert-authority * {ca[0]} {ca[1]}\n")

    def _rsa_host_keys(self, bits: int) -> None:
        """An RSA host key per host, the only key known_hosts records and clients ask for.

        Only: paramiko puts the first key type known_hosts records for a host before
        the config's HostKeyAlgorithms (client.py), so a known Ed25519 key was used.
        """
        known = []
        for host in self.hosts:
            key = host.host_dir / "ssh_host_rsa_key"
            _run(["ssh-keygen", "-q", "-t", "rsa", "-b", str(bits), "-N", "", "-f", str(key)])
            self._append(host.host_dir / "sshd_config", f"HostKey {key}\n")
            public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
            known.append(f"[{host.addr}]:{host.port} {public}\n")
        self.known_hosts.write_text("".join(known))
        wanted = "Host *\n    HostKeyAlgorithms rsa-sha2-512,rsa-sha2-256\n"
        self.ssh_config.write_text(wanted + self.ssh_config.read_text())

    def _sign_client(self) -> None:
        _keygen(self.user_ca_key)
        _run(["ssh-keygen", "-q", "-s", str(self.user_ca_key), "-I", "simcluster-user",
              "-n", self.user, f"{self.client_key}.pub"])  # fmt: skip
        ca = f"{self.user_ca_key}.pub"
        # Only the certificate can log in: no authorized_keys at all.
        no_keys = "AuthorizedKeysFile none"
        self._edit_sshd(lambda text: re.sub(r"(?m)^AuthorizedKeysFile .*$", no_keys, text))
        self._edit_sshd(lambda text: text + f"TrustedUserCAKeys {ca}\n")
        self._append(self.ssh_config, f"Host *\n    CertificateFile {self.client_key}-cert.pub\n")

    def _split_config(self) -> None:
        self.include_dir.mkdir(exist_ok=True)
        blocks = re.split(r"(?m)^(?=Host )", self.ssh_config.read_text())
        for index, block in enumerate(b for b in blocks if b.strip()):
            (self.include_dir / f"{index:03d}.conf").write_text(block)
        self.ssh_config.write_text(f"Include {self.include_dir}/*.conf\n")

    @staticmethod
    def _append(path: Path, text: str) -> None:
        with path.open("a") as handle:
            handle.write(text)


def _drop(text: str, keyword: str) -> str:
    return re.sub(rf"(?m)^\s*{keyword} .*\n", "", text)


def _keygen(key: Path) -> None:
    if not key.exists():
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", key.name, "-f", str(key)])


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
    if done.returncode != 0:
        raise SimClusterError(f"{argv[0]} failed: {done.stderr.decode(errors='replace')}")
