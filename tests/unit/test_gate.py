"""Node 0's agent holds the master port from its preflight to the instant its job starts.

``remote/gate.py`` with real sockets, the controller's lines on a real pipe.
Before, node 0's listener closed on the controller's ``done``, and the go (so
torchrun, and its store) came after: a window in which anything could bind the port.
"""

from __future__ import annotations

import json
import os
import site
import socket

import pytest

from clusterlaunch.remote.gate import checked_and_go
from clusterlaunch.remote.wire import Args, Control, Output, parse_args

# The listener's serve thread once died on a listener closed before it ran (EBADF): an
# agent's stderr, shown as host output, would have held that traceback.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

GO = {"argv": ["python", "-m", "torch.distributed.run"], "first_rank": 0, "env": {}, "unset": []}


def port_taken(port: int) -> bool:
    """Whether binding ``port`` as torchrun's store does (``SO_REUSEADDR``) fails."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
        return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        port: int = probe.getsockname()[1]
        return port


def node0_args(port: int) -> Args:
    """The agent's arguments for node 0's preflight (it binds ``port``)."""
    return parse_args(
        ["--job-id", "j", "--node-rank", "0", "--grace", "1", "--heartbeat-timeout", "15",
         "--rank-files", "--nonce", "n0", "--preflight-timeout", "30",
         "--master-addr", "127.0.0.1", "--listen", str(port), "--timeout", "5", "--", "python"]
    )  # fmt: skip


def preflight(args: Args, lines: str) -> object:
    """The agent's preflight, the controller's ``lines`` sent, then end of file."""
    control_r, control_w = os.pipe()
    out_r, out_w = os.pipe()  # its reports: a few hundred bytes, the pipe holds them
    os.write(control_w, lines.encode())
    os.close(control_w)
    try:
        return checked_and_go(args, Output(out_w), Control(15, control_r), {})
    finally:
        for fd in (control_r, out_r, out_w):
            os.close(fd)


@pytest.fixture(autouse=True)
def _site_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate runs ``site.main()`` for the job's sys.path: this process has its own."""
    monkeypatch.setattr(site, "main", lambda: None)


def test_node_0_holds_the_port_past_the_check_until_the_job_starts() -> None:
    port = free_port()
    held = preflight(node0_args(port), f"{port}\ndone\ngo {json.dumps(GO)}\n")
    assert held is not None
    assert port_taken(port)  # the check is over, the go came: still node 0's
    held.stop()  # type: ignore[attr-defined]  # what the agent does just before the fork
    assert not port_taken(port)


@pytest.mark.parametrize("lines", ["", "{port}\n", "{port}\ndone\n", "{port}\ndone\nno\n"])
def test_without_a_go_the_port_is_let_go(lines: str) -> None:
    port = free_port()
    assert preflight(node0_args(port), lines.format(port=port)) is None
    assert not port_taken(port)


def test_without_a_preflight_nothing_is_held() -> None:
    """``exec``'s agent: no nonce, no checks, nothing to let go of."""
    words = ["--job-id", "j", "--node-rank", "0", "--grace", "1", "--heartbeat-timeout", "15"]
    args = parse_args([*words, "--", "true"])
    held = preflight(args, "")
    assert held is not None
    held.stop()  # type: ignore[attr-defined]
