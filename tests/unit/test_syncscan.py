"""``--sync``'s local checks: refused in one line before any host is contacted, dry run too.

The CLI runs in-process with ``connect`` replaced by a failure, so a check that
let the run go on to contact a host fails the test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.core.syncsource import IgnoreRules, inside
from clusterlaunch.transport.files import LocalFiles
from clusterlaunch.transport.local import local_path, start_directory


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project directory, the current one, whose hosts must never be contacted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 1}\n")
    (tmp_path / "a.py").write_text('print("v2")\n')

    def no_connect(*args: object, **kwargs: object) -> None:
        raise AssertionError("connected")

    monkeypatch.setattr("clusterlaunch.controller.launcher.connect", no_connect)
    return tmp_path


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("clusterlaunch: error: "), err
    return err


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
@pytest.mark.parametrize(
    ("ignore", "script", "said"),
    [
        ("*.py\n", ["a.py"], "a.py: --sync would not copy it (left out by {ignore}:1 ('*.py'))"),
        (
            "# tools\nbin/\n",
            ["--no-python", "./bin/run.sh"],
            "./bin/run.sh: --sync would not copy it (left out by {ignore}:2 ('bin/') "
            "(it leaves out bin/))",
        ),
        ("app/__main__.py\n", ["app"], "app: --sync would not copy it (left out by {ignore}:1"),
        ("*.py\n!a.py\nsub/\n!sub/a.py\n", ["sub/a.py"], "{ignore}:3 ('sub/')"),
    ],
)
def test_a_script_the_ignore_file_leaves_out_is_refused(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    dry_run: list[str],
    ignore: str,
    script: list[str],
    said: str,
) -> None:
    (project / ".clusterlaunchignore").write_text(ignore)
    (project / "bin").mkdir()
    (project / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (project / "bin" / "run.sh").chmod(0o755)
    (project / "app").mkdir()
    (project / "app" / "__main__.py").write_text("")
    (project / "sub").mkdir()
    (project / "sub" / "a.py").write_text("")
    err = refused(capsys, "run", "--sync", *dry_run, "hosts.yaml", *script)
    assert said.format(ignore=project / ".clusterlaunchignore") in err, err
    assert "change .clusterlaunchignore so it keeps" in err


def test_a_script_the_ignore_file_keeps_is_planned(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / ".clusterlaunchignore").write_text("*.py\n!a.py\n")
    assert main(["run", "--sync", "--dry-run", "hosts.yaml", "a.py"]) == 0
    assert "# --sync: 3 files (" in capsys.readouterr().out  # a.py, hosts.yaml, the ignore file


def test_the_dry_run_refuses_what_the_run_refuses(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / os.fsdecode(b"caf\xe9.py")).write_text("")
    for argv in (["run", "a.py"], ["exec", "--", "true"]):
        command, rest = argv[0], argv[1:]
        for dry in ([], ["--dry-run"]):
            err = refused(capsys, command, "--sync", *dry, "hosts.yaml", *rest)
            assert "not UTF-8; rename it or add it to .clusterlaunchignore" in err
    assert main(["run", "--dry-run", "hosts.yaml", "a.py"]) == 0  # without --sync: not looked at


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "not a regular file; make it a text file of patterns or delete"),
        (lambda p: p.mkdir(), "not a regular file"),
        (lambda p: p.symlink_to("gone"), "a link to nothing; fix the link or delete it"),
    ],
    ids=["fifo", "directory", "dangling-link"],
)
def test_an_ignore_file_that_is_no_file_is_refused(
    project: Path, capsys: pytest.CaptureFixture[str], make, said: str
) -> None:
    make(project / ".clusterlaunchignore")
    err = refused(capsys, "exec", "--sync", "hosts.yaml", "--", "true")
    assert f"{project / '.clusterlaunchignore'}: {said}" in err, err


def test_an_ignore_file_linked_to_a_file_is_read(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "patterns").write_text("*.py\n")
    (project / ".clusterlaunchignore").symlink_to("patterns")
    err = refused(capsys, "run", "--sync", "--dry-run", "hosts.yaml", "a.py")
    assert ".clusterlaunchignore:1 ('*.py')" in err


def test_a_localhost_workdir_inside_the_source_is_refused_unless_ignored(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "local.yaml").write_text(
        f"hosts:\n  - {{host: localhost, gpus: 1, workdir: {project}/out/dest}}\n"
    )
    err = refused(capsys, "exec", "--sync", "--dry-run", "local.yaml", "--", "true")
    assert (
        f"localhost: workdir {project}/out/dest is inside the directory --sync copies "
        f"({project}), so every run would copy the last copy into it again; choose a workdir "
        "outside it, or add the line /out/dest/ to .clusterlaunchignore"
    ) in err
    (project / ".clusterlaunchignore").write_text("out/\n")
    assert main(["exec", "--sync", "--dry-run", "local.yaml", "--", "true"]) == 0
    # A relative workdir is under the home directory: here, the source itself.
    monkeypatch.setenv("HOME", str(project))
    (project / "rel.yaml").write_text("hosts:\n  - {host: localhost, gpus: 1, workdir: rel}\n")
    err = refused(capsys, "exec", "--sync", "--dry-run", "rel.yaml", "--", "true")
    assert f"localhost: workdir rel ({project}/rel) is inside" in err


def test_the_ignore_line_that_leaves_a_path_out() -> None:
    rules = IgnoreRules("# c\n*.py\n!keep.py\nbuild/\n", "ig")
    assert rules.why_left_out("a.py") == "ig:2 ('*.py')"
    assert rules.why_left_out("keep.py") is None
    assert rules.why_left_out("build/keep.py") == "ig:4 ('build/') (it leaves out build/)"
    assert rules.why_left_out("build", is_dir=True) == "ig:4 ('build/')"
    assert rules.why_left_out(".git/config") == ("the default .git exclusion (it leaves out .git/)")
    assert rules.why_left_out(".clusterlaunch-sync-x") == "the reserved name .clusterlaunch-sync-*"
    assert rules.why_left_out("src/x.txt") is None


def test_inside() -> None:
    assert inside("/a/b", "/a/b/c/d") == "c/d"
    assert inside("/a/b", "/a/b") is None
    assert inside("/a/b", "/a/bc") is None
    assert inside("/a/b", "/a") is None
    assert inside("/", "/x") == "x"


def test_localhost_paths_are_read_as_over_ssh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert start_directory() == str(tmp_path)
    root = LocalFiles().root
    assert root("~") == local_path("~") == f"{tmp_path}/."
    assert root("~/x y") == f"{tmp_path}/x y"
    assert root("rel") == f"{tmp_path}/rel"
    assert root("~root/x") == f"{tmp_path}/~root/x"  # literal, as the quoted shell word
    assert root("/abs/x") == "/abs/x"
    monkeypatch.setenv("HOME", str(tmp_path / "missing"))
    assert start_directory() == "/"  # as sshd, when the home cannot be entered
