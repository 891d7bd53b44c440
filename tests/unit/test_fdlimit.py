"""The open-file limit is raised for a big launch, or the launch is refused before any contact."""

from __future__ import annotations

import resource

import pytest

from clusterlaunch.core.errors import UsageError
from clusterlaunch.transport import fdlimit


class FakeLimits:
    def __init__(self, soft: int, hard: int) -> None:
        self.limits = (soft, hard)

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.limits

    def set(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.limits = limits


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> FakeLimits:
    fake = FakeLimits(1024, 4096)
    monkeypatch.setattr(fdlimit.resource, "getrlimit", fake.get)
    monkeypatch.setattr(fdlimit.resource, "setrlimit", fake.set)
    return fake


def test_small_launch_leaves_the_limit_alone(limits: FakeLimits) -> None:
    assert fdlimit.ensure_open_files(32) == 1024
    assert limits.limits == (1024, 4096)


def test_256_hosts_raise_the_soft_limit_up_to_what_they_need(limits: FakeLimits) -> None:
    assert fdlimit.ensure_open_files(256) == fdlimit.needed(256) > 1024
    assert limits.limits == (fdlimit.needed(256), 4096)


def test_more_than_the_hard_limit_allows_is_refused_naming_it(limits: FakeLimits) -> None:
    with pytest.raises(UsageError, match=r"4096 hosts need up to \d+ open files.*allows 4096"):
        fdlimit.ensure_open_files(4096)
    assert limits.limits == (1024, 4096)


def test_log_files_count_on_top_of_the_hosts(limits: FakeLimits) -> None:
    """--log-dir keeps a file per rank open: 128 hosts of 8 ranks passed the 1,024 that
    the hosts alone were given."""
    assert fdlimit.needed(128, files=1025) == fdlimit.needed(128) + 1025
    assert fdlimit.ensure_open_files(128, files=1025) == fdlimit.needed(128, files=1025)
    assert limits.limits == (fdlimit.needed(128, files=1025), 4096)


def test_log_files_past_the_hard_limit_are_refused_naming_them(limits: FakeLimits) -> None:
    with pytest.raises(UsageError) as refused:
        fdlimit.ensure_open_files(3, files=4096)
    assert str(refused.value) == (
        f"3 hosts and 4096 --log-dir files need up to {fdlimit.needed(3, 4096)} open files, "
        "and this shell allows 4096 (ulimit -Hn); raise the hard limit (limits.conf nofile) "
        "or launch on fewer hosts or ranks, or no --log-dir"
    )
    assert limits.limits == (1024, 4096)


def test_the_real_limit_of_this_process_covers_256_hosts() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < fdlimit.needed(256):
        pytest.skip(f"hard limit {hard} here")
    try:
        assert fdlimit.ensure_open_files(256) >= fdlimit.needed(256)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
