"""Where ``doctor`` says peers reach each host, against real glibc lookups through a DNS
server of the test's own in a mount namespace (tests/dnsgate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests import dns, dnsgate

pytestmark = pytest.mark.skipif(dns.why_not() is not None, reason=dns.why_not() or "")


def test_the_doctor_looks_up_every_host_at_once(tmp_path: Path) -> None:
    """``doctor`` shows where peers reach each host (its address as this machine
    resolves it): looked up at once and once a name. One after another, each host paid
    the resolver's delay in turn; here the first lookup timed out and that host's
    addresses were missing from the report."""
    names = {f"h{index}.cl.test": f"127.0.0.{20 + index}" for index in range(8)}
    addrs = [*names, "h0.cl.test"]  # a name twice: asked once
    code = (
        "import json, sys\nfrom clusterlaunch.controller.doctor import reached_by_address\n"
        "print(json.dumps(reached_by_address(sys.argv[1:], 32)))"
    )
    with dnsgate.gathering_resolver(tmp_path, names, timeout_s=5) as (prefix, server):
        argv = [*prefix, sys.executable, "-c", code, *addrs]
        said = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(said.stdout) == {name: [addr] for name, addr in names.items()}
    assert server.most_held == len(names)
    assert server.asked == dict.fromkeys(names, 1)
