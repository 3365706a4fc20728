"""bwrap's tmpfs count against one budget across this process's sandboxes: past it, a sandbox's
/tmp and /var/tmp go on disk (16 workers with 2 GiB of tmpfs each would exceed a 24 GiB host)."""

from __future__ import annotations

import logging
import os

import pytest

import swe_sandbox
from swe_sandbox.environments import scratch

from helpers.variants import require_backend

pytestmark = pytest.mark.bwrap
SIZE = 16 << 20  # tmp_size_bytes: each sandbox counts twice this


def fstype(environment, path: str = "/tmp") -> str:
    result = environment.execute({"command": f"stat -f -c %T {path}; echo data > {path}/f && cat {path}/f"})
    assert result["returncode"] == 0, result
    kind, data = result["output"].split()
    assert data == "data"
    return kind


@pytest.fixture
def sandboxes():
    require_backend("bwrap")
    made = []

    def factory(**overrides):
        environment = swe_sandbox.get_environment("bwrap", **{"timeout": 20, "tmp_size_bytes": SIZE, **overrides})
        made.append(environment)
        environment.start()
        return environment

    yield factory
    for environment in made:
        environment.close()


def test_past_the_budget_tmp_goes_on_disk_and_comes_back(sandboxes, caplog):
    budget = scratch.TMPFS.used + 3 * SIZE  # room for one sandbox's two tmpfs, not two sandboxes'
    caplog.set_level(logging.WARNING, logger="swe_sandbox.environments.bwrap")
    first = sandboxes(tmpfs_budget_bytes=budget)
    assert fstype(first) == "tmpfs" and fstype(first, "/var/tmp") == "tmpfs"
    second = sandboxes(tmpfs_budget_bytes=budget)
    assert fstype(second) != "tmpfs" and fstype(second, "/var/tmp") != "tmpfs"
    assert fstype(second, "/dev/shm") == "tmpfs"  # /dev/shm stays (64 MiB, not counted)
    (warning,) = [r.getMessage() for r in caplog.records if "on disk" in r.getMessage()]
    directory = warning.split("on disk (")[1].split(",")[0]
    assert os.path.isfile(os.path.join(directory, "tmp", "f"))  # the sandbox's /tmp, private to it
    assert os.stat(directory).st_mode & 0o777 == 0o700
    assert "environment.tmpfs_budget_bytes" in warning
    second.close()
    assert not os.path.exists(directory)  # removed at close
    first.close()
    third = sandboxes(tmpfs_budget_bytes=budget)  # the budget was given back
    assert fstype(third) == "tmpfs"


def test_a_zero_budget_puts_every_tmp_on_disk(sandboxes):
    assert fstype(sandboxes(tmpfs_budget_bytes=0)) != "tmpfs"


def test_sixteen_default_sandboxes_hold_at_most_half_the_memory_in_tmpfs(sandboxes):
    """The default budget (half the host's memory) with the default 1 GiB /tmp and /var/tmp."""
    before = scratch.TMPFS.used
    made = [sandboxes(tmp_size_bytes=1 << 30) for _ in range(16)]
    kinds = [fstype(environment) for environment in made]
    assert scratch.TMPFS.used <= scratch.default_budget()
    on_tmpfs = kinds.count("tmpfs")
    assert scratch.TMPFS.used - before == on_tmpfs * (2 << 30)
    assert (before + 16 * (2 << 30) > scratch.default_budget()) == (on_tmpfs < 16), kinds
    for environment in made:
        environment.close()
    assert scratch.TMPFS.used == before
