"""A host whose /tmp cannot be written (read-only, or full): one line naming it, before
anything starts.

The agent keeps its job record (for ps and kill) and its claim of the job id in
/tmp/clusterlaunch-UID (/run/user/UID/clusterlaunch where that exists), and torchrun
its per-rank files in /tmp/clusterlaunch-UID always (not in RAM). Such a host passed the
preflight; ``run`` then failed with "cannot create ...: Read-only file system" (127),
or, on a full one, the agent's own traceback twice (exit 1); ``exec`` the same
traceback. Here node1's sshd runs in a mount namespace of its own whose /tmp is
read-only (the cluster's own directory under it stays writable for sshd).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterlaunch.remote import program_source
from clusterlaunch.testing import LoopbackCluster, SimHost
from tests import mountns
from tests.cluster.support import REPO, run_cli, write_hosts

pytestmark = [pytest.mark.cluster]
RECORDS = f"/tmp/clusterlaunch-{os.getuid()}"
SAID = f"cannot write in {RECORDS} (Read-only file system); it holds each job's record"


class ReadOnlyTmpCluster(LoopbackCluster):
    """node1's sshd (and every session it starts) sees /tmp read-only."""

    def _launch_prefix(self, host: SimHost) -> list[str]:
        if host.name != "node1":
            return super()._launch_prefix(host)
        script = (  # rbind: the cluster's directory, bound first, stays writable under it
            'mount --bind "$1" "$1" && mount --rbind /tmp /tmp && '
            'mount -o remount,ro,bind /tmp && shift && exec "$@"'
        )
        unshare = ["unshare", "--mount", "--propagation", "private"]
        return [*unshare, "sh", "-c", script, "sh", str(self.base_dir)]


@pytest.fixture
def cluster(sim_cluster_factory) -> LoopbackCluster:
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    return sim_cluster_factory(2, cls=ReadOnlyTmpCluster)


@pytest.mark.parametrize("command", ["check", "run"])
def test_the_preflight_names_a_read_only_tmp(cluster, tmp_path: Path, command: str) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli(command, cluster, str(hosts), "sleeper.py", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    [row] = [line for line in (result.stdout + result.stderr).splitlines() if " node1 " in line]
    assert SAID in row and row.endswith("free space in it, or make it writable for this user")
    assert "Traceback" not in result.stdout + result.stderr


def test_exec_starts_nothing_where_tmp_is_read_only(cluster, tmp_path: Path) -> None:
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("exec", cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == 127, result.stderr
    assert "[node0] ran" in result.stdout and "[node1]" not in result.stdout
    assert f"clusterlaunch: node1: {SAID}" in result.stderr
    assert "Traceback" not in result.stderr


def _checks_under(mount: str, rank_files: bool = False) -> list[str]:
    """The preflight's (and the exec agent's) scratch check, run where ``mount`` (shell, run in a
    private mount namespace) has put a tmpfs over the record folder. Only the folder: a
    tmpfs over all of /tmp hid the checkout and its venv when they lay below /tmp.
    ``rank_files``: a torchrun job's, which needs that folder for its per-rank files too."""
    code = "from clusterlaunch.remote.scratch import scratch_problem\n"
    code += f"print(scratch_problem({rank_files}))"
    setup = f'mkdir -p -m 0700 {RECORDS} && {mount} && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", setup]
    argv += ["sh", sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_a_full_record_folder_is_named_too() -> None:
    """The same checks on a full tmpfs (the name fits, the data does not)."""
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    fill = f"mount -t tmpfs -o size=64k,mode=0700 tmpfs {RECORDS}"
    fill += f" && {{ head -c 1M /dev/zero >{RECORDS}/fill 2>/dev/null; true; }}"
    said = f"cannot write in {RECORDS} (No space left on device); it holds each job's record"
    assert [line[: len(said)] for line in _checks_under(fill)] == [said]


def test_a_record_folder_another_user_owns_is_named() -> None:
    """root could write in nobody's /tmp/clusterlaunch-0, so the job ran without a record:
    ``ps`` said "no jobs" (exit 0) and ``kill`` "no running job" while it ran."""
    if (why := mountns.why_not()) is not None:
        pytest.skip(why)
    plant = f"mount -t tmpfs -o mode=0700,uid=65534 tmpfs {RECORDS}"
    said = f"{RECORDS} is not this user's private folder (another user owns it"
    assert [line[: len(said)] for line in _checks_under(plant)] == [said]


def test_a_record_folder_root_made_for_another_user_is_named_as_such() -> None:
    """A user (nobody, here) whose /tmp/clusterlaunch-UID root made (0755) was told "cannot
    write in it (Permission denied) ... free space in it": an ownership problem, not space."""
    python = "/usr/bin/python3"  # nobody cannot run the venv's when it lies under /root
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.access(python, os.X_OK):
        pytest.skip("needs root, setpriv and /usr/bin/python3 to be another user")
    # The probe as shipped (its checks, stdlib only), where nobody may read it.
    bundle = Path(f"/tmp/clusterlaunch-test-probe-{os.getpid()}.py")
    bundle.write_bytes(program_source("probe"))
    bundle.chmod(0o644)
    code = (
        f"import importlib.util as u; s = u.spec_from_file_location('probe', {str(bundle)!r}); "
        "m = u.module_from_spec(s); s.loader.exec_module(m); print(m.scratch_problem())"
    )
    planted = Path("/tmp/clusterlaunch-65534")
    planted.mkdir(mode=0o755)
    try:
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        done = subprocess.run(
            [*as_nobody, "env", "-i", python, "-S", "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        planted.rmdir()
        bundle.unlink()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{planted} is not this user's private folder"), done.stdout


# /run/user/UID as systemd makes it (a tmpfs of the user's, mode 0700), in the namespace only.
RUNTIME_DIR = (
    f"mount -t tmpfs -o mode=0755 tmpfs /run/user && mkdir -m 0700 /run/user/{os.getuid()}"
)


@pytest.mark.parametrize(
    ("mount", "said"),
    [
        ("-o ro,mode=0700", f"cannot write in {RECORDS} (Read-only file system); it holds "),
        ("-o size=64k,mode=0700", f"cannot write in {RECORDS} (No space left on device); it "),
        ("-o mode=0700,uid=65534", f"{RECORDS} is not this user's private folder (another "),
    ],
    ids=["read-only", "full", "another-users"],
)
def test_with_a_runtime_dir_the_rank_files_folder_in_tmp_is_checked(mount: str, said: str) -> None:
    """Records and claims go to /run/user/UID (RAM, capped at 10% of it), torchrun's per-rank
    files to /tmp/clusterlaunch-UID: a torchrun job needs both; ``exec`` only the first."""
    if (why := mountns.why_not()) is not None or not os.path.isdir("/run/user"):
        pytest.skip(why or "no /run/user to mount over")
    setup = f"{RUNTIME_DIR} && mount -t tmpfs {mount} tmpfs {RECORDS}"
    setup += f" && {{ head -c 1M /dev/zero >{RECORDS}/fill 2>/dev/null; true; }}"
    assert _checks_under(setup) == ["None"]  # exec: its record is in /run/user/UID
    [line] = _checks_under(setup, rank_files=True)
    assert line.startswith(said), line
    assert "torchrun's per-rank files" in line and "ps and kill" not in line, line


class RuntimeDirReadOnlyTmpCluster(ReadOnlyTmpCluster):
    """node1's sshd sees /tmp read-only and has a /run/user/UID, as under systemd."""

    def _launch_prefix(self, host: SimHost) -> list[str]:
        prefix = super()._launch_prefix(host)
        if host.name != "node1":
            return prefix
        *unshare, script, argv0, base = prefix  # unshare ... sh -c SCRIPT sh BASE
        return [*unshare, RUNTIME_DIR + " && " + script, argv0, base]


def test_with_a_runtime_dir_run_needs_tmp_for_its_rank_files_and_exec_does_not(
    sim_cluster_factory, tmp_path: Path
) -> None:
    if (why := mountns.why_not()) is not None or not os.path.isdir("/run/user"):
        pytest.skip(why or "no /run/user to mount over")
    cluster = sim_cluster_factory(2, cls=RuntimeDirReadOnlyTmpCluster)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1), ("node1", 1)])
    result = run_cli("run", cluster, str(hosts), "sleeper.py", timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    [row] = [line for line in (result.stdout + result.stderr).splitlines() if " node1 " in line]
    said = f"cannot write in {RECORDS} (Read-only file system); it holds torchrun's per-rank files"
    assert said in row, row
    result = run_cli("exec", cluster, str(hosts), "--", "echo", "ran", timeout=60)
    assert result.returncode == 0, result.stderr  # its record is in /run/user/UID
    assert "[node0] ran" in result.stdout and "[node1] ran" in result.stdout
