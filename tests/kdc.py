"""A Kerberos realm of a test's own: MIT ``krb5kdc`` on loopback, a user, and a ticket.

Everything lives under the test's directory and is named by the environment the
realm hands out (``KRB5_CONFIG``, ``KRB5_KDC_PROFILE``, ``KRB5CCNAME``), so the
machine's /etc/krb5.conf and ticket caches are never touched. The KDC is stopped
by its PID at the end.
"""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.programs import why_missing

REALM = "TEST.LOCAL"
USER = pwd.getpwuid(os.getuid()).pw_name
"""The realm's user: the local one, whom sshd lets a ticket of that name log in as."""
_PASSWORD = "userpw"


def why_no_kdc() -> str | None:
    """The skip reason when the MIT KDC or client programs are missing."""
    for program, package in (
        ("krb5kdc", "krb5-kdc"),
        ("kdb5_util", "krb5-kdc"),
        ("kadmin.local", "krb5-admin-server"),
        ("kinit", "krb5-user"),
        ("klist", "krb5-user"),
    ):
        if (reason := why_missing(program, package)) is not None:
            return reason
    return None


@dataclass(frozen=True)
class Realm:
    env: dict[str, str]
    """The environment that names this realm and its ticket cache (add to os.environ)."""

    def kinit(self) -> None:
        subprocess.run(
            ["kinit", USER], input=_PASSWORD + "\n", text=True, env=self.env,
            capture_output=True, check=True, timeout=30,
        )  # fmt: skip

    def kdestroy(self) -> None:
        subprocess.run(["kdestroy"], env=self.env, capture_output=True, timeout=30)

    def host_keytab(self, host: str, keytab: Path) -> None:
        """A service key for ``host/HOST`` (what ssh asks a ticket for), in ``keytab``."""
        for query in (f"addprinc -randkey host/{host}", f"ktadd -k {keytab} host/{host}"):
            add = ["kadmin.local", "-q", query]
            subprocess.run(add, env=self.env, capture_output=True, check=True, timeout=60)


@contextmanager
def realm(directory: Path) -> Iterator[Realm]:
    """A running KDC with the local user as its user (no ticket yet: :meth:`Realm.kinit`)."""
    directory.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    (directory / "krb5.conf").write_text(
        f"[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n"
        f" dns_lookup_realm = false\n rdns = false\n dns_canonicalize_hostname = false\n"
        f"[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n"
    )
    (directory / "kdc.conf").write_text(
        f"[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n"
        f"[realms]\n {REALM} = {{\n  database_name = {directory}/principal\n"
        f"  key_stash_file = {directory}/stash\n  acl_file = {directory}/kadm5.acl\n }}\n"
        f"[logging]\n kdc = FILE:{directory}/kdc.log\n"
    )
    env = {
        **os.environ,
        "KRB5_CONFIG": str(directory / "krb5.conf"),
        "KRB5_KDC_PROFILE": str(directory / "kdc.conf"),
        "KRB5CCNAME": f"FILE:{directory}/ccache",
    }
    create = ["kdb5_util", "-r", REALM, "create", "-s", "-P", "masterpw"]
    subprocess.run(create, env=env, capture_output=True, check=True, timeout=60)
    add = ["kadmin.local", "-q", f"addprinc -pw {_PASSWORD} {USER}"]
    subprocess.run(add, env=env, capture_output=True, check=True, timeout=60)
    kdc = subprocess.Popen(
        ["krb5kdc", "-n", "-P", str(directory / "kdc.pid")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(port, kdc)
        yield Realm(env)
    finally:
        kdc.terminate()
        kdc.wait(timeout=30)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(port: int, kdc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if kdc.poll() is not None:
            raise RuntimeError(f"krb5kdc exited with status {kdc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"krb5kdc did not listen on 127.0.0.1:{port} in 30 s")
