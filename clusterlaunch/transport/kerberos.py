"""Whether the user holds a Kerberos ticket: only then does ``GSSAPIAuthentication yes``
change how ssh logs in.

ssh with GSSAPIAuthentication tries ``gssapi-with-mic`` first where the server
offers it; without a ticket the attempt fails on the client and ssh goes on to
its keys, as the paramiko client does. Debian and Ubuntu (and Fedora through
its ssh_config.d) set it for every host in /etc/ssh/ssh_config, so refusing the
setting itself refused every host once that file was read. With a ticket, ssh
would log in with it (another account mapping: ``.k5login``, not
``authorized_keys``; delegated credentials for Kerberized file systems), which
the paramiko client cannot do: that case is refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

_KLIST_TIMEOUT_S = 10.0
"""``klist -s`` reads a local cache (KCM: a local daemon); 10 s is a stuck one."""


def held_ticket(environ: Mapping[str, str] = os.environ) -> str | None:
    """Why a Kerberos ticket may be held (for a message), or None where none is.

    ``klist -s`` (MIT and Heimdal: exit 0 for a valid, unexpired ticket) decides
    where it is installed. Without it only a file cache can be looked at; a
    ``KRB5CCNAME`` of another kind (KEYRING:, KCM:) counts as held, since it
    cannot be checked.
    """
    klist = shutil.which("klist", path=environ.get("PATH"))
    if klist is not None:
        try:
            done = subprocess.run(
                [klist, "-s"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=dict(environ),
                timeout=_KLIST_TIMEOUT_S,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"klist -s could not tell whether you hold a Kerberos ticket ({exc})"
        return "you hold a Kerberos ticket (klist -s)" if done.returncode == 0 else None
    cache = environ.get("KRB5CCNAME") or f"FILE:/tmp/krb5cc_{os.getuid()}"
    kind, colon, rest = cache.partition(":")
    if not colon or kind in ("FILE", "DIR"):
        path = rest if colon else cache
        if not os.path.exists(path):
            return None
        return f"a Kerberos ticket cache exists ({path}; no klist to check it)"
    return f"KRB5CCNAME={cache} may hold a Kerberos ticket (no klist to check it)"
