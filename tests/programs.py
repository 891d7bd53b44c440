"""Skip marks for tests that run an optional program, naming the package to install.

scripts/test.sh installs every program the suite uses when run as root on
Debian/Ubuntu (scripts/test-programs.sh lists them), so there these marks never skip.
"""

from __future__ import annotations

import shutil

import pytest


def why_missing(program: str, package: str) -> str | None:
    """The skip reason when *program* is not on PATH, else None."""
    if shutil.which(program) is not None:
        return None
    return (
        f"{program} not installed (Debian/Ubuntu package {package}; "
        "scripts/test.sh installs it when run as root)"
    )


def needs(program: str, package: str) -> pytest.MarkDecorator:
    """``@needs("rsync", "rsync")``: skip, saying what to install, when it is missing."""
    reason = why_missing(program, package)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


needs_rsync = needs("rsync", "rsync")
