"""``--sync`` against real sshd hosts: what arrives, what is sent again, what fails.

The simulated hosts all share this machine's file system, so each test gives
each host its own destination (``workdir:`` in the hosts file) and then looks
at the copies directly. The SFTP path is forced the way it happens for real:
the controller has no rsync on its PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.cluster.support import PYTHON, cli_argv, rank_lines, write_hosts
from tests.programs import needs_rsync

pytestmark = [pytest.mark.cluster]

TRAIN = """\
import os, pathlib
print("synced", os.getcwd(), pathlib.Path("pkg/deep/util.py").read_text().strip())
"""
FILES = {
    ".clusterlaunchignore": "# generated weights and data\n*.ckpt\ndata/\n",
    "train.py": TRAIN,
    "pkg/__init__.py": "",
    "pkg/deep/util.py": "VERSION = 1\n",
    "run.sh": "#!/bin/sh\necho run\n",
    "notes with spaces ünï 'q' \"x\".txt": "notes\n",
}
IGNORED = {
    "model.ckpt": "weights",
    "pkg/deep/old.ckpt": "weights",
    "data/shard0.bin": "data",
    "data/nested/shard1.bin": "data",
    ".git/HEAD": "ref: refs/heads/main\n",
    ".git/objects/ab/cdef": "blob",
}
LINKS = {"latest.py": "train.py"}
SENT_FIRST = len(FILES) + len(LINKS)
WITHOUT_RSYNC = {"PATH": "/nonexistent"}  # the controller has neither rsync nor ssh
BOTH_METHODS = [pytest.param("rsync", None, marks=needs_rsync), ("sftp", WITHOUT_RSYNC)]
REPORT = re.compile(
    r"^clusterlaunch: sync (\S+)(?: \(and (.*): same directory\))?"
    r"(?: -> (.*): (rsync|sftp|local), sent (\d+) files?| *: skipped, (.*) is this directory)",
    re.MULTILINE,
)


def make_project(root: Path) -> Path:
    for path, text in {**FILES, **IGNORED}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / "run.sh").chmod(0o755)
    for link, target in LINKS.items():
        (root / link).symlink_to(target)
    return root


def tree_of(root: Path) -> dict[str, object]:
    """Every file (text, mode) and link (target) under ``root``, by relative path."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_file():
            found[name] = (path.read_text(), path.stat().st_mode & 0o777)
    return found


def expected_tree(project: Path) -> dict[str, object]:
    return {k: v for k, v in tree_of(project).items() if k in FILES or k in LINKS}


def run_in(
    project: Path, cluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The CLI, started in ``project`` (the directory --sync copies)."""
    return subprocess.run(
        cli_argv(*args[:1], cluster, *args[1:]),
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def reports(stderr: str) -> dict[str, tuple[str, int]]:
    """``{host: (method, files sent)}`` from the sync lines; hosts sharing a copy too."""
    found: dict[str, tuple[str, int]] = {}
    for match in REPORT.finditer(stderr):
        hosts = [match[1], *(match[2].split(", ") if match[2] else [])]
        result = ("same", 0) if match[6] is not None else (match[4], int(match[5]))
        found.update(dict.fromkeys(hosts, result))
    return found


def ssh_without_rsync(tmp_path: Path) -> dict[str, str]:
    """A PATH with the OpenSSH client (and setpriv) but no rsync: SFTP over the master."""
    bin_dir = tmp_path / "ssh-only-bin"
    bin_dir.mkdir()
    for program in ("ssh", "setpriv"):
        found = shutil.which(program)
        if found:
            (bin_dir / program).symlink_to(found)
    return {"PATH": str(bin_dir)}


@pytest.mark.parametrize(
    ("method", "env", "client"),
    [
        pytest.param("rsync", None, "paramiko", marks=needs_rsync),
        ("sftp", WITHOUT_RSYNC, "paramiko"),
        pytest.param("rsync", None, "openssh", marks=needs_rsync),
        ("sftp", "ssh-only", "openssh"),
    ],
)
def test_sync_sends_selected_files_then_only_changes(
    sim_cluster, tmp_path: Path, method: str, env: dict[str, str] | str | None, client: str
) -> None:
    if env == "ssh-only":
        env = ssh_without_rsync(tmp_path)
    assert not isinstance(env, str)
    project = make_project(tmp_path / "project")
    dests = {host: tmp_path / "dest dir" / f"dest-{host}" for host in ("node0", "node1")}
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [(h, 1, {"workdir": str(d)}) for h, d in dests.items()]
    )
    argv = ("exec", "--ssh-client", client, "--sync", str(hosts), "--", PYTHON, "train.py")

    first = run_in(project, sim_cluster, *argv, env=env)
    assert first.returncode == 0, first.stderr
    assert reports(first.stderr) == {h: (method, SENT_FIRST) for h in dests}
    for host, dest in dests.items():
        assert tree_of(dest) == expected_tree(project)  # nothing ignored, no .git, no tokens
        assert f"[{host}] synced {dest} VERSION = 1" in first.stdout

    again = run_in(project, sim_cluster, *argv, env=env)
    assert again.returncode == 0, again.stderr
    assert reports(again.stderr) == {h: (method, 0) for h in dests}

    (project / "pkg" / "deep" / "util.py").write_text("VERSION = 22\n")
    changed = run_in(project, sim_cluster, *argv, env=env)
    assert changed.returncode == 0, changed.stderr
    assert reports(changed.stderr) == {h: (method, 1) for h in dests}
    for host, dest in dests.items():
        assert tree_of(dest) == expected_tree(project)
        assert f"[{host}] synced {dest} VERSION = 22" in changed.stdout


@needs_rsync
def test_shared_directories_are_copied_once_and_the_source_not_at_all(
    sim_cluster, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "project")
    shared, local = tmp_path / "shared", tmp_path / "local copy"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [
            ("node0", 1, {"workdir": str(shared)}),
            ("node1", 1, {"workdir": str(shared)}),  # the same directory: one copy
            ("node2", 1),  # the default workdir: this very directory
            ("localhost", 1, {"workdir": str(local)}),
        ],
    )
    result = run_in(project, sim_cluster, "exec", "--sync", str(hosts), "--", "true")
    assert result.returncode == 0, result.stderr
    assert reports(result.stderr) == {
        "node0": ("rsync", SENT_FIRST),
        "node1": ("rsync", SENT_FIRST),
        "node2": ("same", 0),
        "localhost": ("local", SENT_FIRST),
    }
    assert "sync node0 (and node1: same directory)" in result.stderr
    assert tree_of(shared) == tree_of(local) == expected_tree(project)
    assert not list(project.glob(".clusterlaunch-*"))  # the tokens are gone everywhere


def test_unwritable_destination_fails_before_anything_starts(sim_cluster, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    (tmp_path / "a file").write_text("")
    good = tmp_path / "good"
    marker = tmp_path / "started"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1, {"workdir": str(good)}), ("node1", 1, {"workdir": f"{tmp_path}/a file/x"})],
    )
    result = run_in(project, sim_cluster, "exec", "--sync", str(hosts), "--", "touch", str(marker))
    assert result.returncode == 2, result.stderr
    assert "code sync (--sync) failed on 1 host(s); nothing was started" in result.stderr
    assert re.search(r"node1 +sync +cannot create the workdir .*Not a directory", result.stderr)
    assert not marker.exists()
    assert list(good.iterdir()) == []  # created, but no copy and no token left behind


@pytest.mark.parametrize(("method", "env"), BOTH_METHODS)
def test_failed_copy_fails_the_launch(
    sim_cluster, tmp_path: Path, method: str, env: dict[str, str] | None
) -> None:
    project = make_project(tmp_path / "project")
    good, bad = tmp_path / "good", tmp_path / "bad"
    (bad / "train.py").mkdir(parents=True)  # a directory where a file must go
    (bad / "train.py" / "keep").write_text("")
    marker = tmp_path / "started"
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [("node0", 1, {"workdir": str(good)}), ("node1", 1, {"workdir": str(bad)})],
    )
    result = run_in(
        project, sim_cluster, "exec", "--sync", str(hosts), "--", "touch", str(marker), env=env
    )
    assert result.returncode == 2, result.stderr
    assert "code sync (--sync) failed on 1 host(s); nothing was started" in result.stderr
    assert re.search(rf"node1 +sync \({method}\) +.*train\.py", result.stderr), result.stderr
    assert reports(result.stderr) == {"node0": (method, SENT_FIRST)}
    assert not marker.exists()


@pytest.mark.parametrize(("method", "env"), BOTH_METHODS)
@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_host_path_of_another_type_is_kept_and_named(
    sim_cluster, tmp_path: Path, method: str, env: dict[str, str] | None, kind: str
) -> None:
    """The source has a directory where the host has a file, or a link (to a dataset):
    rsync replaced either without a word, deleting the host's file."""
    project = make_project(tmp_path / "project")
    (project / "ckpt").mkdir()
    (project / "ckpt" / "x.txt").write_text("source\n")
    dest, dataset = tmp_path / "dest", tmp_path / "dataset"
    dest.mkdir()
    dataset.mkdir()
    if kind == "file":
        (dest / "ckpt").write_text("the host's own\n")
    else:
        (dest / "ckpt").symlink_to(dataset)
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(dest)})])
    result = run_in(project, sim_cluster, "exec", "--sync", str(hosts), "--", "true", env=env)
    assert result.returncode == 2, result.stderr
    said = rf"node0 +sync \({method}\) +ckpt is a {kind} on the host, not a directory"
    assert re.search(said, result.stderr), result.stderr
    if kind == "file":
        assert (dest / "ckpt").read_text() == "the host's own\n"
    else:
        assert (dest / "ckpt").is_symlink() and list(dataset.iterdir()) == []


@pytest.mark.torch
def test_run_starts_the_synced_script(sim_cluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "job.py").write_text(
        "import os, sys\n"
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "print(f'rank {dist.get_rank()} of {dist.get_world_size()} in {os.getcwd()}')\n"
        "dist.barrier()\n"
        "dist.destroy_process_group()\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    dests = [tmp_path / "node0", tmp_path / "node1"]
    hosts = write_hosts(
        tmp_path / "hosts.yaml",
        [(f"node{i}", 1, {"workdir": str(d)}) for i, d in enumerate(dests)],
    )
    result = run_in(project, sim_cluster, "run", "--sync", str(hosts), "job.py")
    assert result.returncode == 0, result.stderr
    lines = sorted(text for *_, text in rank_lines(result.stdout))
    assert lines == [f"rank {i} of 2 in {d}" for i, d in enumerate(dests)]


@needs_rsync
def test_rsync_follows_proxy_jump_with_strict_host_keys(
    sim_cluster_factory, tmp_path: Path
) -> None:
    cluster = sim_cluster_factory(2)
    config = tmp_path / "ssh_config"
    text = Path(cluster.ssh_config).read_text()
    config.write_text(text.replace("Host node1\n", "Host node1\n    ProxyJump node0\n"))
    project = make_project(tmp_path / "project")
    dest = tmp_path / "dest"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node1", 1, {"workdir": str(dest)})])
    args = ("--ssh-config", str(config), "--host-key-policy", "strict", str(hosts), "--", "true")
    result = run_in(project, None, "exec", "--sync", *args)
    assert result.returncode == 0, result.stderr
    assert reports(result.stderr) == {"node1": ("rsync", SENT_FIRST)}
    assert tree_of(dest) == expected_tree(project)
    # node0 serves only as the jump host: once for clusterlaunch, once for rsync's ssh.
    log = (cluster.host("node0").host_dir / "sshd.log").read_text()
    assert log.count("Accepted publickey") == 2, log


@needs_rsync
def test_rsync_trusts_the_key_clusterlaunch_recorded(sim_cluster_factory, tmp_path: Path) -> None:
    cluster = sim_cluster_factory(1)
    Path(cluster.known_hosts).write_text("")  # accept-new records node0's key first
    project = make_project(tmp_path / "project")
    dest = tmp_path / "dest"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(dest)})])
    # Explicit: the sim ssh_config says StrictHostKeyChecking yes, which would refuse.
    policy = ("--host-key-policy", "accept-new")
    result = run_in(project, cluster, "exec", "--sync", *policy, str(hosts), "--", "true")
    assert result.returncode == 0, result.stderr
    assert reports(result.stderr) == {"node0": ("rsync", SENT_FIRST)}
    assert Path(cluster.known_hosts).read_text().strip()


@needs_rsync
def test_rsync_and_sftp_agree_on_what_is_unchanged(sim_cluster, tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(tmp_path / "d")})])
    argv = ("exec", "--sync", str(hosts), "--", "true")
    runs = [run_in(project, sim_cluster, *argv, env=env) for env in (None, WITHOUT_RSYNC, None)]
    assert [reports(r.stderr) for r in runs] == [
        {"node0": ("rsync", SENT_FIRST)},
        {"node0": ("sftp", 0)},
        {"node0": ("rsync", 0)},
    ]


def test_ctrl_c_during_an_upload_stops_it_and_leaves_nothing(sim_cluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with (project / "big.bin").open("wb") as handle:
        handle.truncate(1 << 30)  # sparse: instant here, seconds over SFTP
    dest = tmp_path / "dest"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(dest)})])
    process = subprocess.Popen(
        cli_argv("exec", sim_cluster, "--sync", str(hosts), "--", "true"),
        cwd=project,
        stderr=subprocess.PIPE,
        env={**os.environ, **WITHOUT_RSYNC},
    )
    try:
        deadline = time.monotonic() + 60
        while not list(dest.glob(".clusterlaunch-tmp-*")):  # the upload has begun
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=10) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert list(dest.iterdir()) == []  # the partial upload and the token are removed


@needs_rsync
def test_rsync_keeps_a_sparse_file_sparse(sim_cluster, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with (project / "data.img").open("wb") as handle:
        handle.truncate(64 << 20)  # a hole: no block allocated here
    dest = tmp_path / "dest"
    hosts = write_hosts(tmp_path / "hosts.yaml", [("node0", 1, {"workdir": str(dest)})])
    result = run_in(project, sim_cluster, "exec", "--sync", str(hosts), "--", "true")
    assert result.returncode == 0, result.stderr
    assert reports(result.stderr) == {"node0": ("rsync", 1)}
    copied = (dest / "data.img").stat()
    assert copied.st_size == 64 << 20
    assert copied.st_blocks * 512 < 1 << 20, copied.st_blocks  # not 64 MiB of zeros


@pytest.mark.parametrize(
    ("workdir", "under_home"),
    [("reldest", "reldest"), ("~/x y", "x y"), ("~nobody/x", "~nobody/x"), ("~", ".")],
)
def test_a_localhost_workdir_is_read_as_over_ssh(
    tmp_path: Path, workdir: str, under_home: str
) -> None:
    """Relative: under the home directory (not this one); ``~user/x``: literal, there too.

    Before, ``reldest`` landed in the controller's directory, and ``~nobody/x`` was
    created literally by the shell but copied to nobody's home (which failed).
    """
    project = make_project(tmp_path / "project")
    home = tmp_path / "home"
    home.mkdir()
    hosts = write_hosts(tmp_path / "hosts.yaml", [("localhost", 1, {"workdir": workdir})])
    # The controller caches its programs' payloads in the user's cache, by default in HOME:
    # elsewhere, so that the workdir ~ holds just what --sync sent.
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = run_in(project, None, "exec", "--sync", str(hosts), "--", "pwd", env=env)
    assert result.returncode == 0, result.stderr
    expected = (home / under_home).resolve()
    assert result.stdout == f"[localhost] {expected}\n"
    assert reports(result.stderr) == {"localhost": ("local", SENT_FIRST)}
    assert tree_of(expected) == expected_tree(project)
    assert not (project / "reldest").exists() and not (project / "~nobody").exists()


def test_a_localhost_workdir_inside_the_source_is_refused(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")
    hosts = write_hosts(
        tmp_path / "hosts.yaml", [("localhost", 1, {"workdir": str(project / "out")})]
    )
    argv = ("exec", "--sync", str(hosts), "--", "true")
    result = run_in(project, None, *argv)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert f"localhost: workdir {project / 'out'} is inside the directory --sync" in result.stderr
    assert not (project / "out").exists()  # nothing created, nothing copied
    with (project / ".clusterlaunchignore").open("a") as ignore:
        ignore.write("/out/\n")
    runs = [run_in(project, None, *argv) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr
    assert [reports(r.stderr) for r in runs] == [
        {"localhost": ("local", SENT_FIRST)},
        {"localhost": ("local", 0)},
    ]
    assert not (project / "out" / "out").exists()  # no copy of the copy


def _world_readable_project() -> Path:
    """A project an unprivileged user can reach (pytest's tmp_path is root's, 0700)."""
    project = make_project(Path(tempfile.mkdtemp(prefix="cl-sync-unreadable-")))
    os.chmod(project, 0o755)
    return project


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_an_unreadable_source_entry_is_refused_before_any_host(tmp_path: Path, kind: str) -> None:
    """As root, ``unshare -U`` runs clusterlaunch as an unmapped user, for whom mode 000
    means what it means for anyone; as another user it runs as that user."""
    project = _world_readable_project()
    locked = project / "pkg" / ("locked.bin" if kind == "file" else "lockdir")
    try:
        if kind == "file":
            locked.write_text("secret")
        else:
            locked.mkdir()
        locked.chmod(0)
        dest = tmp_path / "dest"
        hosts = write_hosts(project / "hosts.yaml", [("localhost", 1, {"workdir": str(dest)})])
        prefix = ["unshare", "-U"] if os.geteuid() == 0 else []
        result = subprocess.run(
            [*prefix, *cli_argv("exec", None, "--sync", str(hosts), "--", "true")],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if "unshare failed" in result.stderr:
            pytest.skip(f"no user namespaces here: {result.stderr.strip()}")
        assert result.returncode == 2, result.stderr
        assert result.stderr == (
            f"clusterlaunch: error: {locked}: cannot read (Permission denied); fix its "
            "permissions or add it to .clusterlaunchignore\n"
        )
        assert not dest.exists()
    finally:
        locked.chmod(0o700)
        shutil.rmtree(project)
