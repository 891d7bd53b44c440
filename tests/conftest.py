"""Shared fixtures: a real simulated cluster (one OpenSSH sshd per host) on this machine.

* ``sim_cluster`` — session-wide 4-host loopback cluster, started once; after every test
  that uses it, nothing may be left running on it (checked automatically).
* ``sim_cluster_factory`` — ``make(n_hosts, **kwargs)`` for a test's own loopback
  clusters; stopped, and checked for leftover processes, at teardown.
* ``netns_cluster_factory`` — the same for :class:`NetnsCluster` (skips unless root
  with working network namespaces).
* ``assert_no_orphans`` — ``assert_no_orphans(cluster, timeout=5.0)`` fails the test
  when processes started through the cluster's hosts are still alive (and kills them).
* Tests marked ``torch`` skip, saying why, when the hosts' interpreter has no torch.
* Every test must leave the SIGINT/SIGTERM/SIGHUP handlers as it found them (checked
  automatically): ``cli.main()`` run in process restores its caller's.

Ports: ``CLUSTERLAUNCH_TEST_SSH_PORT`` pins the session cluster's port (factory
clusters use the ports above it); unset, the first free port from 22220 is used, so
that two suites on one machine do not clash.  Jobs on the hosts run with the interpreter
named by ``CLUSTERLAUNCH_TEST_PYTHON`` (set by scripts/test.sh, read by
tests/cluster/support.py), by default the one running pytest.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

# Before any test module imports paramiko, as the product does: paramiko then skips
# importing invoke (with unittest and asyncio), 0.4 s of every worker's collection.
import clusterlaunch.transport.noinvoke  # noqa: F401
from clusterlaunch.testing import (
    DEFAULT_PORT,
    LoopbackCluster,
    PortInUseError,
    find_free_port,
    kill_processes,
    wait_until_gone,
)
from clusterlaunch.testing.loopback import SSHD
from clusterlaunch.testing.sshd import loopback_addrs
from tests.cluster.support import ssh_agent
from tests.netns import NetnsCluster, netns_unavailable_reason
from tests.slurm.real import MARKS as REAL_SLURM_MARKS

PORT_ENV = "CLUSTERLAUNCH_TEST_SSH_PORT"
ORPHAN_TIMEOUT = 5.0


def _orphan_report(cluster: LoopbackCluster, timeout: float) -> str | None:
    """Wait for the cluster's session processes to exit; kill and describe the rest."""
    left = wait_until_gone(cluster.markers(), timeout=timeout)
    if not left:
        return None
    kill_processes(left)
    lines = "\n".join(f"  {proc}" for proc in left)
    return f"processes still running on simulated hosts after {timeout}s (killed):\n{lines}"


def _check_orphans(cluster: LoopbackCluster, timeout: float = ORPHAN_TIMEOUT) -> None:
    if (report := _orphan_report(cluster, timeout)) is not None:
        pytest.fail(report, pytrace=False)


@pytest.fixture
def assert_no_orphans() -> Callable[..., None]:
    """``assert_no_orphans(cluster, timeout=5.0)``: fail if the hosts still run processes."""
    return _check_orphans


def _start_loopback(
    n_hosts: int, base_dir: Path, port_offset: int, **kwargs: Any
) -> LoopbackCluster:
    """Start a loopback cluster on the pinned port (+offset) or on a free one.

    ``cls`` picks another kind, e.g. :class:`SshVariantCluster` (certificates, Include).
    """
    cls: type[LoopbackCluster] = kwargs.pop("cls", LoopbackCluster)
    if "port" in kwargs:
        return cls(n_hosts, base_dir, **kwargs).start()
    pinned = os.environ.get(PORT_ENV)
    if pinned:
        try:
            return cls(n_hosts, base_dir, port=int(pinned) + port_offset, **kwargs).start()
        except PortInUseError as exc:
            raise PortInUseError(f"{exc} (port from {PORT_ENV}={pinned}; pick another)") from exc
    first = kwargs.get("first_host_octet", 11)
    addrs = loopback_addrs(n_hosts, first)
    # Each xdist worker searches from its own ports, and a retry moves on by a random
    # step: with both workers searching from one port, a step of 1 each, a clean-clone
    # CI once failed all five tries (likely each took some of the other's addresses).
    first_port = DEFAULT_PORT + port_offset + _PORTS_PER_WORKER * _worker_index()
    start = first_port
    for _ in range(5):
        port = find_free_port(addrs, start)
        try:
            return cls(n_hosts, base_dir, port=port, **kwargs).start()
        except PortInUseError:  # taken by a concurrent suite since find_free_port
            start = port + 1 + random.randrange(_PORTS_PER_WORKER)
    raise PortInUseError(f"could not find a free port from {first_port}")


_PORTS_PER_WORKER = 20


def _worker_index() -> int:
    """0 for ``gw0`` (or no xdist), 1 for ``gw1``, ..."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name[2:].isdigit() else 0


def _require_sshd() -> None:
    if not os.access(SSHD, os.X_OK):
        pytest.skip(
            f"{SSHD} not installed (package openssh-server; "
            "scripts/test.sh installs it when run as root)"
        )


_HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def _signal_handlers_left_as_found() -> Iterator[None]:
    # A handler left installed (as cli.main() once left its own) turns the next
    # Ctrl-C into an exception inside some later test, and the suite goes on.
    before = {signum: signal.getsignal(signum) for signum in _HANDLED}
    yield
    after = {signum: signal.getsignal(signum) for signum in _HANDLED}
    for signum, handler in before.items():
        signal.signal(signum, handler)
    assert after == before, "the test left signal handlers installed"


@pytest.fixture(scope="session")
def _torch_missing() -> str | None:
    """Why the interpreter that runs the jobs has no torch, or None.

    Asked without importing torch (~1.2 s and hundreds of MB in this process).
    """
    python = os.environ.get("CLUSTERLAUNCH_TEST_PYTHON", sys.executable)
    if python == sys.executable:
        found = importlib.util.find_spec("torch") is not None
    else:
        probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
        found = subprocess.run([python, "-c", probe], capture_output=True).returncode == 0
    if found:
        return None
    return f"torch is not installed for {python} (pip install -e '.[torch]'; scripts/test.sh does)"


@pytest.fixture(autouse=True)
def _torch_for_torch_tests(request: pytest.FixtureRequest) -> None:
    """Tests marked ``torch`` run torchrun jobs: without torch they skip, not fail."""
    if request.node.get_closest_marker("torch") is not None:
        reason = request.getfixturevalue("_torch_missing")
        if reason is not None:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """A 4-host loopback cluster shared by the whole session."""
    _require_sshd()
    cluster = _start_loopback(4, tmp_path_factory.mktemp("sim_cluster"), port_offset=0)
    try:
        yield cluster
    finally:
        report = _orphan_report(cluster, timeout=1.0)
        cluster.stop()
    if report is not None:
        pytest.fail(report, pytrace=False)


@pytest.fixture(autouse=True)
def _sim_cluster_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used ``sim_cluster``, nothing may run on it any more."""
    yield
    if "sim_cluster" in request.fixturenames:
        _check_orphans(request.getfixturevalue("sim_cluster"))


C = TypeVar("C", bound=LoopbackCluster)


def _factory(tmp_path: Path, start: Callable[..., C]) -> Iterator[Callable[..., C]]:
    made: list[C] = []

    def make(n_hosts: int, **kwargs: Any) -> C:
        base = tmp_path / f"cluster{len(made)}"
        cluster = start(n_hosts, base, len(made) + 1, **kwargs)
        made.append(cluster)
        return cluster

    yield make
    reports = []
    for cluster in made:  # check all, stop all, then fail
        try:
            reports.append(_orphan_report(cluster, ORPHAN_TIMEOUT))
        finally:
            cluster.stop()
    if failed := [r for r in reports if r is not None]:
        pytest.fail("\n".join(failed), pytrace=False)


@pytest.fixture
def sim_cluster_factory(tmp_path: Path) -> Iterator[Callable[..., LoopbackCluster]]:
    """``make(n_hosts, **kwargs) -> LoopbackCluster`` (started); all stopped at teardown."""
    _require_sshd()
    yield from _factory(tmp_path, _start_loopback)


@pytest.fixture
def ssh_agent_sock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ssh-agent of the test's own (no keys yet), named by ``SSH_AUTH_SOCK``."""
    with ssh_agent(tmp_path / "agent.sock") as sock:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield sock


@pytest.fixture(scope="session")
def _netns_unavailable() -> str | None:
    return netns_unavailable_reason()


@pytest.fixture
def netns_cluster_factory(
    tmp_path: Path, _netns_unavailable: str | None
) -> Iterator[Callable[..., NetnsCluster]]:
    """``make(n_hosts, **kwargs) -> NetnsCluster`` (started); skips without root/netns."""
    _require_sshd()
    if _netns_unavailable is not None:
        pytest.skip(f"network namespaces unavailable: {_netns_unavailable}")

    def start(n_hosts: int, base: Path, _offset: int, **kwargs: Any) -> NetnsCluster:
        return NetnsCluster(n_hosts, base, **kwargs).start()

    yield from _factory(tmp_path, start)


def pytest_configure(config: pytest.Config) -> None:
    # A background job of a non-interactive shell (`cmd &` in a script, nohup) starts
    # with SIGINT ignored, and every child inherits that: the controllers the tests
    # Ctrl-C would rightly keep ignoring it (what nohup asks for), and those tests
    # failed (11 of them, seen). The suite gives itself what a terminal gives.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Under xdist (scripts/test.sh), the real Slurm tests share one worker: each
    # worker would start a Slurm controller of its own on the same ports.
    for item in items:
        if item.get_closest_marker("slurm_real") is not None:
            item.add_marker(pytest.mark.xdist_group("slurm"))


# What the real Slurm tests are marked with (tests/slurm/test_real_slurm.py), torch or not.
_REAL_SLURM_MARKS = (set(REAL_SLURM_MARKS), {*REAL_SLURM_MARKS, "torch"})


def pytest_collection_finish(session: pytest.Session) -> None:
    _freeze_what_lasts_the_session()


def pytest_sessionstart(session: pytest.Session) -> None:
    _freeze_what_lasts_the_session()  # xdist's controller collects nothing


def _freeze_what_lasts_the_session() -> None:
    # What exists now (modules, collected items) lives until the session ends:
    # frozen, the garbage collector stops walking it on every full collection,
    # among them the five pytest runs as each process ends (py-spy: 0.95 s of
    # CPU over the unit tier's three processes). Unit tier, 3 alternating pairs:
    # 9.14-9.34 -> 8.17-8.58 s, CPU 15.0-15.6 -> 13.2-13.9 s.
    gc.freeze()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` where a real Slurm test may run, plain ``load`` where none can.

    ``loadgroup`` hands each ungrouped test to a worker on its own; ``load`` sends
    them in batches. The unit tier (``-m "not cluster"``, 1,820 tests, 2 workers),
    alternating runs: faster in 4 of 4 pairs, by 0.2-1.3 s (medians 11.2 -> 10.5 s;
    9.9 -> 9.3 s in 4 earlier pairs of ``--dist loadgroup`` and ``--dist load``).
    """
    if config.getoption("dist", None) != "loadgroup" or not _no_real_slurm_selected(config):
        return None  # xdist's own choice
    from xdist.scheduler import LoadScheduling

    return LoadScheduling(config, log)


def _no_real_slurm_selected(config: pytest.Config) -> bool:
    """True when ``-m`` deselects every real Slurm test (False when unsure)."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr:
        return False
    try:
        from _pytest.mark.expression import Expression  # pytest's own -m parser

        expression = Expression.compile(markexpr)
    except (ImportError, SyntaxError):  # SyntaxError: how pytest reports a bad -m
        return False
    with_arguments: list[str] = []

    def has(marks: set[str]) -> Callable[..., bool]:
        def matcher(name: str, /, **kwargs: Any) -> bool:
            if kwargs:
                with_arguments.append(name)  # mark(key=value): not judged here
            return name in marks

        return matcher

    selected = [expression.evaluate(has(marks)) for marks in _REAL_SLURM_MARKS]
    return not any(selected) and not with_arguments


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print what tests measured (``record_property``), e.g. cluster start-up time.

    Measurements are reported, not asserted on tightly: timing targets live in
    the benchmarks (docs/benchmarks.md).
    """
    rows = [
        f"{report.nodeid}: {name} = {value}"
        for report in terminalreporter.stats.get("passed", [])
        for name, value in getattr(report, "user_properties", [])
    ]
    if rows:
        terminalreporter.write_sep("-", "measurements")
        for row in rows:
            terminalreporter.write_line(row)
