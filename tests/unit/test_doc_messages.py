"""Messages the docs quote are the ones the tool prints (provoked here, compared whole)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clusterlaunch.cli.main import main
from clusterlaunch.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _error_line(tmp_path: Path, name: str, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line ``run --dry-run`` prints for hosts file ``name`` holding ``text``."""
    (tmp_path / name).write_text(text)
    assert main(["run", "--dry-run", str(tmp_path / name), "t.py"]) == 2
    return capsys.readouterr().err.replace(f"{tmp_path}/", "").rstrip("\n")


def _quoted(doc: str, start: str) -> str:
    """The doc's line that begins with ``start``."""
    text = (ROOT / doc).read_text()
    return next(line for line in text.splitlines() if line.startswith(start))


def test_readme_quotes_the_gpus_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hosts = "# a\n# b\n# c\nhosts:\n  - {host: a, gpus: 1}\n  - host: b\n    gpus: 0\n"
    real = _error_line(tmp_path, "hosts.yaml", hosts, capsys)
    assert _quoted("README.md", "clusterlaunch: error: hosts.yaml:7: hosts[1].gpus") == real


def test_hosts_file_doc_quotes_the_typo_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = (
        "defaults:\n  python: python3\nhosts:\n  - {host: a, gpus: 1}\n  - host: b\n    gpu: 2\n"
    )
    real = _error_line(tmp_path, "typo.yaml", hosts, capsys)
    assert _quoted("docs/hosts-file.md", "clusterlaunch: error: typo.yaml:6:") == real


def _python_help(command: str) -> str | None:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    actions = sub.choices[command]._actions
    return next(a.help for a in actions if "--python" in a.option_strings)


@pytest.mark.parametrize("command", ["ps", "kill", "stacks"])
def test_every_command_states_the_same_python_default(command: str) -> None:
    """ps, kill and stacks choose the interpreter as run does (planner.python_for)."""
    assert _python_help(command) == _python_help("run")
    assert "else python3" in str(_python_help(command))


def test_troubleshooting_quotes_the_lost_touch_lines() -> None:
    from clusterlaunch.core.losttouch import host_stopped_the_job, job_may_run_on

    said, stop = host_stopped_the_job("node1", 2, suspended=False)
    doc = "docs/troubleshooting.md"
    assert _quoted(doc, "clusterlaunch: node1: the host stopped") == f"clusterlaunch: {said}"
    assert _quoted(doc, "clusterlaunch: job failed: node1 lost touch") == (
        f"clusterlaunch: job failed: {stop.reason}"
    )
    may_run = job_may_run_on("node2", 120, "JOBID")
    assert _quoted(doc, "clusterlaunch: node2: its part of the job") == f"clusterlaunch: {may_run}"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("m.yaml", "master_addr: 'fe80::1%eth0'\nhosts:\n  - {host: node0, gpus: 1}\n"),
        ("ll.yaml", "hosts:\n  - {host: 'fe80::1%eth0', gpus: 1}\n  - {host: n1, gpus: 1}\n"),
    ],
)
def test_hosts_file_doc_quotes_the_zone_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    real = _error_line(tmp_path, name, text, capsys)
    assert _quoted("docs/hosts-file.md", real[:50]) == real


def test_cli_doc_quotes_the_ipv6_include_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "h.yaml").write_text("hosts:\n  - {host: 'fd42:6::11', gpus: 2}\n")
    argv = ["run", "--dry-run", "--include", "fd42:6::11:1", str(tmp_path / "h.yaml"), "t.py"]
    assert main(argv) == 2
    real = capsys.readouterr().err.rstrip("\n")
    doc = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    assert f"(`{real}`)" in doc, real


def test_hosts_file_doc_quotes_one_name_on_two_ports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = (
        "hosts:\n  - {host: 203.0.113.7, gpus: 1, port: 2201}\n"
        "  - {host: 203.0.113.7, gpus: 1, port: 2202}\n"
    )
    real = _error_line(tmp_path, "hosts.yaml", hosts, capsys)
    assert _quoted("docs/hosts-file.md", "clusterlaunch: error: hosts.yaml:3: host: 203") == real


def test_hosts_file_doc_quotes_localhost_made_node0_by_exclude(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = "# a\n# b\n# c\n# d\nhosts:\n  - host: node0\n    gpus: 1\n    # x\n"
    hosts += "  - {host: localhost, gpus: 1}\n  - {host: node1, gpus: 1}\n"
    (tmp_path / "h.yaml").write_text(hosts)
    assert main(["run", "--dry-run", "--exclude", "node0", str(tmp_path / "h.yaml"), "t.py"]) == 2
    real = capsys.readouterr().err.replace(f"{tmp_path}/", "").rstrip("\n")
    assert _quoted("docs/hosts-file.md", "clusterlaunch: error: h.yaml:9: hosts[1]") == real
