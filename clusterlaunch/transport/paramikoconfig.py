"""paramiko's ssh_config reader, without the rest of paramiko.

``import paramiko.config`` runs paramiko's package ``__init__`` first, which
imports the whole SSH implementation (transport, ciphers, key types, SFTP,
cryptography's and PyNaCl's native modules): 42 ms of the 105 ms that the
command line's import took (``python -X importtime``, bytecode cached), paid
by every command even with ``--ssh-client openssh``, which needs only the
config reader. paramiko's ``config`` module imports nothing of paramiko but
``ssh_exception``, so both are loaded from paramiko's own directory as a
private package: paramiko's code, unchanged, in classes of its own. The
paramiko client still imports paramiko itself when it connects; the config it
reads never reaches paramiko's own objects (only the option mappings do).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

from clusterlaunch.transport import noinvoke  # noqa: F401  (before paramiko's config)

PACKAGE = "clusterlaunch.transport._paramiko"
"""The private package's name (paramiko's own stays unimported)."""


def _load() -> types.ModuleType:
    """paramiko's ``config`` module under :data:`PACKAGE` (loaded once per process)."""
    loaded = sys.modules.get(f"{PACKAGE}.config")
    if loaded is not None:
        return loaded
    found = importlib.util.find_spec("paramiko")  # finds the directory, imports nothing
    if found is None or not found.submodule_search_locations:
        raise ImportError("paramiko is not installed (pip install clusterlaunch brings it)")
    package = types.ModuleType(PACKAGE, "paramiko's config reader (see paramikoconfig)")
    package.__path__ = list(found.submodule_search_locations)
    sys.modules.setdefault(PACKAGE, package)
    return importlib.import_module(f"{PACKAGE}.config")


if TYPE_CHECKING:
    from paramiko.config import SSHConfig, SSHConfigDict
    from paramiko.ssh_exception import SSHException
else:
    _config: Any = _load()
    SSHConfig = _config.SSHConfig
    SSHConfigDict = _config.SSHConfigDict
    SSHException = sys.modules[f"{PACKAGE}.ssh_exception"].SSHException

__all__ = ["SSHConfig", "SSHConfigDict", "SSHException"]
