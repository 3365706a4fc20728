"""The kit's fixtures, all derived from ONE: ``backend_under_test`` (a ``kit.Variant``).

``swe_sandbox.testing.plugin`` registers this module when ``--swe-sandbox-backend NAME`` is given;
a project that runs the kit inside its own suite lists it in its top-level conftest.py
(``pytest_plugins = ["swe_sandbox.testing.plugin", "swe_sandbox.testing.fixtures"]``) and overrides
``backend_under_test`` there (parametrised over its variants, module scope).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swe_sandbox.testing.kit import (
    FIXTURE_TIMEOUT,
    REQUIRES_MARKER,
    Variant,
    hosts_its_workspace,
    shareable_workspace,
)


@pytest.fixture(scope="session")
def backend_under_test(request: pytest.FixtureRequest) -> Variant:
    """The variant named by ``--swe-sandbox-backend`` (a backend, preset name or YAML file).

    Raises:
        pytest.UsageError: the option is missing.
    """
    name = request.config.getoption("swe_sandbox_backend", None)
    if not name:
        raise pytest.UsageError("no backend under test: pass --swe-sandbox-backend NAME")
    return Variant.from_name(name)


@pytest.fixture(autouse=True)
def _swe_sandbox_requirements(request: pytest.FixtureRequest) -> None:
    """``xfail(strict=True)`` with the backend's reason when it lacks what the test ``requires``."""
    needed = [cap for mark in request.node.iter_markers(REQUIRES_MARKER) for cap in mark.args]
    if not needed:
        return
    variant: Variant = request.getfixturevalue("backend_under_test")
    variant.require_available()
    missing = variant.missing()
    lacked = [cap for cap in needed if cap in missing]
    if lacked:
        # the capability is named: an XPASS(strict) then says which declaration is stale
        reason = f"{variant.name}: {missing[lacked[0]]} (declared missing: {lacked[0]})"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture(scope="module")
def env(backend_under_test: Variant) -> Iterator[Any]:
    """One environment of the backend under test, shared by the tests of a module (started on first use).

    The default timeout is ``FIXTURE_TIMEOUT`` seconds. Tests that kill, break or close things use
    ``make_env`` instead. Skips (fails under ``CI``) when the backend is unavailable here.
    """
    backend_under_test.require_available()
    environment = backend_under_test.make(timeout=FIXTURE_TIMEOUT)
    try:
        yield environment
    finally:
        environment.close()


@pytest.fixture
def backend(backend_under_test: Variant) -> str:
    """The name of the variant under test (``local``, ``docker-exec``, ...)."""
    return backend_under_test.name


@pytest.fixture
def make_env(env: Any, backend_under_test: Variant) -> Iterator[Callable[..., Any]]:
    """Factory of fresh environments of the variant under test (``timeout`` defaults to
    ``FIXTURE_TIMEOUT``); all are closed after the test. Takes ``env`` for its availability check."""
    made: list[Any] = []

    def factory(**overrides: Any) -> Any:
        overrides.setdefault("timeout", FIXTURE_TIMEOUT)
        environment = backend_under_test.make(**overrides)
        made.append(environment)
        return environment

    yield factory
    for environment in made:
        environment.close()


@pytest.fixture
def workspace_env(make_env: Callable[..., Any], backend_under_test: Variant, tmp_path: Path) -> Any:
    """A fresh environment working on ``tmp_path``: a backend with a ``workspace`` field gets it
    (bind-mounted, or copied in: read results back with ``kit.read_in_sandbox``, not from
    ``tmp_path``); the others run in it (``cwd``)."""
    if hosts_its_workspace(backend_under_test.environment_class):
        return make_env(workspace=str(shareable_workspace(tmp_path)))
    return make_env(cwd=str(tmp_path))
