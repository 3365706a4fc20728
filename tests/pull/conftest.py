"""Fixtures of the pull tests: one real registry on loopback per session (Debian's docker-registry,
started and stopped here), our base image pushed there (``helpers.engine_images``)."""

from __future__ import annotations

from typing import Iterator

import pytest
from helpers.engine_images import ENGINES, PushedImage, push_test_image, remove_pushed, require_engine
from helpers.registry import Registry

from swe_sandbox.environments import environment_class


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    server = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pushed(registry: Registry) -> Iterator[PushedImage]:
    image = push_test_image(registry)
    yield image
    for engine in ENGINES:  # what the tests pulled: the images are the session's own
        if environment_class(engine).unavailable_reason() is None:
            remove_pushed(engine, image)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    require_engine(request.param)
    return request.param
