"""OpenSSH's own reading of a config, the ground truth the SSH config tests compare with."""

from __future__ import annotations

import subprocess
from pathlib import Path


def ssh_g(config: Path, host: str = "n0") -> subprocess.CompletedProcess[str]:
    """``ssh -G -F CONFIG HOST``: what ssh would use for ``host``, or why it refuses."""
    return subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True)
