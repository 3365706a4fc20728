"""Fixtures of the pull tests besides the session's registry (``registry``, ``pushed`` and
``silent_registry`` live in tests/conftest.py, so that every module shares one registry)."""

from __future__ import annotations

import pytest

from helpers.engine_images import ENGINES, require_engine


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """Each engine in turn (a failure under CI when it is missing)."""
    require_engine(request.param)
    return request.param
