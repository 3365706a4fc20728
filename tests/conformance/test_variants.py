"""Contract rules that compare our backends or concern one of them (not part of the kit, which runs
against one backend at a time)."""

from __future__ import annotations

import os

import pytest

import swe_sandbox
from swe_sandbox.testing.kit import run

from helpers.variants import BACKENDS, make_variant, variant


@pytest.mark.local
def test_local_default_cwd_is_process_cwd(tmp_path, monkeypatch):
    """local: with no `cwd` anywhere, commands run in the directory the process was in."""
    variant("local").require_available()
    monkeypatch.chdir(tmp_path)
    with swe_sandbox.get_environment("local", timeout=10) as environment:
        assert run(environment, "pwd")["output"] == f"{tmp_path}\n"


def test_missing_cwd_same_on_every_backend():
    """A missing `cwd` gives the same result (returncode, output, exception_info) on every backend."""
    missing = "/nonexistent-swe-sandbox-dir/sub"
    seen = {}
    for name in BACKENDS:
        if variant(name).environment_class.unavailable_reason() is not None:
            if "CI" in os.environ:
                variant(name).require_available()  # fails the test, naming why
            continue
        with make_variant(name, timeout=10) as environment:
            result = run(environment, "echo hi", cwd=missing)
        seen[name] = (result["returncode"], result["output"], result["exception_info"])
    if len(seen) < 2:
        pytest.skip(f"needs two available backends, have {sorted(seen)}")
    first = next(iter(seen.values()))
    assert all(value == first for value in seen.values()), seen
