"""Fixtures the unit tests share (the simulated cluster's are in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterlaunch.controller import launcher


@pytest.fixture
def far_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory for a command that must be refused before any host is
    contacted: ``far.yaml`` (one host that does not resolve) and ``train.py``; a
    connection attempt fails the test."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "far.yaml").write_text("hosts:\n  - {host: unreachable.invalid, gpus: 1}\n")
    (tmp_path / "train.py").write_text("print('hi')\n")

    def contact(*args: object, **kwargs: object) -> None:
        raise AssertionError("a host was contacted")

    monkeypatch.setattr(launcher, "connect_all", contact)
    return tmp_path
