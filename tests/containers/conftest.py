"""Fixtures of the docker and podman tests: the engine under test, and a factory of its environments."""

from __future__ import annotations

import pytest

import swe_sandbox

from helpers.variants import require_backend

ENGINES = [pytest.param(name, marks=getattr(pytest.mark, name), id=name) for name in ("docker", "podman")]


@pytest.fixture(params=ENGINES)
def engine(request):
    """``docker`` or ``podman`` (a failure under CI when the engine is missing, else a skip)."""
    require_backend(request.param)
    return request.param


@pytest.fixture
def make(engine):
    """Factory of environments of the engine under test (``timeout`` 20 s unless given); all closed after the test."""
    made = []

    def factory(**overrides):
        overrides.setdefault("timeout", 20)
        env = swe_sandbox.get_environment(engine, **overrides)
        made.append(env)
        return env

    yield factory
    for env in made:
        env.close()
