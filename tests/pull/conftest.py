"""Fixtures of the pull tests: one real registry on loopback per session (Debian's docker-registry,
started and stopped here), our base image pushed there (``helpers.engine_images``)."""

from __future__ import annotations

from typing import Iterator

import pytest
from helpers.engine_images import ENGINES, PushedImage, push_test_image, require_engine
from helpers.registry import Registry


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pushed(registry: Registry) -> PushedImage:
    return push_test_image(registry)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    require_engine(request.param)
    return request.param
