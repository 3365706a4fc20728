"""Our tests use the conformance kit (``swe_sandbox.testing``) like any backend's would: the kit's
fixtures (``env``, ``make_env``, ``backend``, ``workspace_env``) all derive from
``backend_under_test``, which this file parametrises over our variants (``helpers.variants``).

Each variant carries its backend's marker (pyproject.toml), so ``pytest -m bwrap`` runs one backend
only. A backend whose ``unavailable_reason()`` is not None is skipped with that reason, except when
the ``CI`` environment variable is set: a backend missing in CI is a failure, not a skip. What a
backend lacks is declared by the backend itself (``missing_capabilities``) and makes the kit tests
needing it strict xfails with its reason.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.environments import environment_class

# tests/ on sys.path (whatever the import mode): test modules import helpers from tests/helpers/ and
# the backends' test servers as ``from helpers.variants import ...`` / ``from ssh.sshd import ...``.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from helpers.variants import UNIT_SKIPS_VARIANTS, VARIANTS  # noqa: E402 - needs tests/ on sys.path

pytest_plugins = ["swe_sandbox.testing.plugin", "swe_sandbox.testing.fixtures"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the agent's own tests (tests/unit) on ``UNIT_SKIPS_VARIANTS``."""
    unit = Path(__file__).parent / "unit"
    repeated = [item for item in items if unit in Path(str(item.fspath)).parents
                and getattr(getattr(getattr(item, "callspec", None), "params", {}).get("backend_under_test"),
                            "name", None) in UNIT_SKIPS_VARIANTS]
    if repeated:
        config.hook.pytest_deselected(items=repeated)
        items[:] = [item for item in items if item not in repeated]


@pytest.fixture(scope="module", params=[pytest.param(variant, marks=getattr(pytest.mark, variant.backend),
                                                     id=name) for name, variant in VARIANTS.items()])
def backend_under_test(request: pytest.FixtureRequest) -> Any:
    """The variant under test (``helpers.variants.VARIANTS``); the kit's fixtures derive from it."""
    return request.param


# -- a registry on loopback (tests/pull/): session-wide here, where every module shares them --------


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real registry on loopback (Debian's docker-registry, ``helpers.registry``), for the session."""
    from helpers.registry import Registry

    server = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pushed(registry: Any) -> Iterator[Any]:
    """Our base image pushed to ``registry`` under a new name (``helpers.engine_images``); what the
    tests pulled of it is removed from both engines at the end."""
    from helpers.engine_images import ENGINES, push_test_image, remove_pushed

    image = push_test_image(registry)
    yield image
    for engine in ENGINES:
        if environment_class(engine).unavailable_reason() is None:
            remove_pushed(engine, image)


@pytest.fixture
def silent_registry() -> Iterator[str]:
    """``127.0.0.1:PORT`` where connections are taken (the kernel's backlog) and never answered."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"127.0.0.1:{sock.getsockname()[1]}"
