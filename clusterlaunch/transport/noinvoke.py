"""Keep paramiko from importing ``invoke``: imported before paramiko is.

paramiko.config imports the ``invoke`` package, when installed, only to run
``Match exec`` commands; clusterlaunch never lets paramiko evaluate those
(``ssh -G`` resolves such a config: :mod:`.sshresolve`). The import cost 80 ms
of CPU in every command (it brings unittest.mock and asyncio along); a None
entry in ``sys.modules`` makes paramiko take its "invoke is not installed" path.
"""

from __future__ import annotations

import sys

ACTIVE = sys.modules.setdefault("invoke", None) is None  # type: ignore[arg-type]
"""False when something imported invoke before us (then it stays)."""
